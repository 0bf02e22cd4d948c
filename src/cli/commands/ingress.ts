/**
 * `orc why ingress/NAME`: what stands between an Ingress and traffic — the controller, the nodes it
 * chose (or that none match), each port's backend service and ready endpoints, each node's report.
 */
import { explainIngress, objectParams } from '../../agent/index.ts'
import type { Ingress, Node, Pod, Service } from '../../model/index.ts'
import { callRoute } from '../call.ts'
import type { ApiCaller } from '../remote.ts'

export async function ingressWhyOutput(c: ApiCaller, name: string, output: 'table' | 'json'): Promise<string> {
  const { object } = (await callRoute(c, 'getObject', objectParams({ kind: 'Ingress', namespace: '', name }))) as { object: Ingress }
  const list = async <T>(kind: string): Promise<T[]> => (await callRoute(c, 'listObjects', { kind }, { query: { all: 1 } })).items as unknown as T[]
  const [nodes, services, pods] = await Promise.all([list<Node>('Node'), list<Service>('Service'), list<Pod>('Pod')])
  const lines = explainIngress(object, nodes, services, pods)
  if (output === 'json') return JSON.stringify({ ingress: `ingress/${name}`, status: object.status ?? {}, explanation: lines }, null, 2) + '\n'
  return [`ingress/${name} (controller ${object.spec?.controller ?? '<none>'}):`, ...lines.map((l) => `  ${l}`)].join('\n') + '\n'
}
