/**
 * `orc rollback pod/NAME` restores the same bytes (docs/images.md): a tag may name other content
 * now than when the restored revision ran, so each registry image of the restored spec gets the
 * digest that revision ran (`status.images`, recorded by the node that pulled it) appended:
 * `registry/app:1.2` becomes `registry/app:1.2@sha256:…`. The revision it writes says so in its
 * content; an image that already names a digest, or that no node ever pulled, is left as it was.
 */
import { isRegistryReference } from '../../images/index.ts'
import { isPlainObject, type ObjectRef } from '../../model/index.ts'
import type { ObjectStore } from '../../store/index.ts'
import { isControllerAuthor, recordedPins } from '../pods/worker.ts'

/** How far back the recorded digests are looked for (status writes since the restored revision). */
const MAX_LOOKBACK = 200

export async function pinImagesOnRollback(
  store: ObjectStore,
  ref: ObjectRef,
  to: number | string,
): Promise<((desired: Record<string, unknown>) => Record<string, unknown>) | undefined> {
  if (ref.kind !== 'Pod') return undefined
  const revs = await store.history(ref)
  const target = revs.find((r) => r.id === to || r.number === to)
  if (target === undefined) return undefined
  // The spec revision the target holds: the last user write at or before it (the lifecycle pins by it).
  const specRev = revs.filter((r) => r.number <= target.number && r.op !== 'delete' && !isControllerAuthor(r.author)).at(-1)?.number
  if (specRev === undefined) return undefined
  let pins: ReturnType<typeof recordedPins> = []
  for (const r of revs.slice(-MAX_LOOKBACK).reverse()) {
    if (r.number < specRev || r.op === 'delete' || !isControllerAuthor(r.author)) continue
    const obj = await store.at(ref, r.id).catch(() => undefined)
    pins = recordedPins(obj?.status, specRev)
    if (pins.length > 0) break
  }
  if (pins.length === 0) return undefined
  return (desired) => {
    const spec = desired.spec
    if (!isPlainObject(spec) || !Array.isArray(spec.containers)) return desired
    const containers = spec.containers.map((c: unknown) => {
      if (!isPlainObject(c) || typeof c.image !== 'string' || !isRegistryReference(c.image) || c.image.includes('@')) return c
      const pin = pins.find((p) => p.name === c.name && p.image === c.image)
      return pin === undefined ? c : { ...c, image: `${c.image}@${pin.digest}` }
    })
    return { ...desired, spec: { ...spec, containers } }
  }
}
