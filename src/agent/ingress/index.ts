/** Ingress in the agent: the tcp-proxy controller (docs/services.md, "Ingress"). */

export { type IngressComponents, IngressController } from './controller.ts'
export {
  type Backend,
  clusterEndpointReach,
  type EndpointReach,
  explainIngress,
  type Family,
  type FederatedReach,
  INGRESS_CONTROLLER,
  ingressWantsNode,
  type NodeView,
  nodeStatusOf,
  type PlannedListener,
  planIngressListeners,
  resolveBackend,
  TCP_PROXY,
} from './plan.ts'
export { type ProxyListener, type ProxyOptions, TcpProxy } from './proxy.ts'
