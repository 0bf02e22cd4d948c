/**
 * The API's checks of Volume writes (docs/storage.md): a Volume that pods use is not deleted (the
 * pods would lose their data under them); a placed Volume's size and node do not change (resize
 * and moves are not built: the data would not follow).
 */
import { OrcError, type OrcObject, type Pod, type VirtualMachine, type Volume, volumeBytes, volumeRefsOf } from '../../model/index.ts'
import { finishedForGood } from '../sched/index.ts'

/** The pods of the namespace (not finished for good) that name the Volume. */
export function podsUsingVolume(pods: readonly Pod[], namespace: string, name: string): string[] {
  return pods
    .filter((p) => (p.metadata.namespace ?? 'default') === namespace && volumeRefsOf(p.spec).includes(name))
    .filter((p) => !finishedForGood((p.status as { phase?: unknown } | undefined)?.phase, p.spec?.restartPolicy))
    .map((p) => p.metadata.name)
    .sort()
}

/** The VMs of the namespace that have the Volume as a disk. */
export function vmsUsingVolume(vms: readonly VirtualMachine[], namespace: string, name: string): string[] {
  return vms
    .filter((v) => (v.metadata.namespace ?? 'default') === namespace && (v.spec?.disks ?? []).some((d) => d.volume?.name === name))
    .map((v) => v.metadata.name)
    .sort()
}

/** Throws unless Volume NS/NAME may be deleted now (no pod and no VM uses it). */
export function admitVolumeDelete(pods: readonly Pod[], namespace: string, name: string, vms: readonly VirtualMachine[] = []): void {
  const users = [...podsUsingVolume(pods, namespace, name).map((n) => `pod/${n}`), ...vmsUsingVolume(vms, namespace, name).map((n) => `vm/${n}`)]
  if (users.length === 0) return
  const shown = users.slice(0, 5).join(', ')
  throw new OrcError(
    'conflict',
    `volume/${name} is used by ${shown}${users.length > 5 ? ` and ${users.length - 5} more` : ''}: delete or change ${users.length > 1 ? 'them' : 'it'} first (nothing was deleted)`,
    { kind: 'Volume', namespace, name, users },
  )
}

/** Throws when an apply would change what a placed Volume's data cannot follow (size, node). */
export function admitVolumeChange(obj: OrcObject, existing: Volume | undefined): void {
  if (obj.kind !== 'Volume' || existing === undefined) return
  const next = obj as Volume
  const placed = existing.status?.node
  if (placed === undefined) return
  if (volumeBytes(next.spec) !== volumeBytes(existing.spec))
    throw new OrcError(
      'invalid',
      `volume/${next.metadata.name}: size ${String(existing.spec?.size)} cannot change once placed (resize is not built); make a new volume and copy the data`,
    )
  if (next.spec?.node !== undefined && next.spec.node !== placed)
    throw new OrcError(
      'invalid',
      `volume/${next.metadata.name}: its data lives on node ${placed}; spec.node ${next.spec.node} cannot move it (moving volumes is not built)`,
    )
  if ((next.spec?.driver ?? '') !== (existing.spec?.driver ?? ''))
    throw new OrcError('invalid', `volume/${next.metadata.name}: spec.driver cannot change once placed`)
}
