/** The store's on-disk layout in LevelDB (docs/architecture.md, "On disk"). */
export const FORMAT = 1
export const K_FORMAT = 'm:format'
export const K_REPLICA = 'm:replica'
export const K_VECTOR = 'm:vector'
export const K_YCOUNTER = 'm:ycounter'
export const K_SNAPSHOT = 'y:snapshot'
export const Y_LOG = 'y:u:'
export const REV = 'r:'
export const IDX = 'o:'
/** Per pod key, the nodes it has been bound to (JSON array): who may write its lifecycle status (trust.ts). */
export const BOUND = 'b:'
/** Object keys whose content here merged a concurrent branch (empty value): the receipt checks' mergedKeys. */
export const MERGED = 'c:'

export const enc = new TextEncoder()
export const dec = new TextDecoder()
const pad = (n: number, w: number) => String(n).padStart(w, '0')
export const revKey = (replica: string, seq: number) => `${REV}${replica}:${pad(seq, 15)}`
export const idxKey = (key: string, id: string) => `${IDX}${key}\x00${id}`
export const yLogKey = (n: number) => `${Y_LOG}${pad(n, 15)}`
export const json = (v: unknown) => enc.encode(JSON.stringify(v))
export const unjson = <T>(b: Uint8Array): T => JSON.parse(dec.decode(b)) as T
