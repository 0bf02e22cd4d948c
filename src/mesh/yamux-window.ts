/**
 * Yamux window updates the way hashicorp/yamux and go-yamux send them: once at least half of a
 * stream's receive window has been used, not after every data frame. @chainsafe/libp2p-yamux 8
 * answers every received data frame with a window-update frame; on a gossip stream that is one extra
 * encrypted frame and one write syscall per message, about a third of an idle agent's socket writes
 * at 20 members (docs/benchmarks.md, "Mesh"). Streams that must send a flag (SYN/ACK) and every
 * state other than Established keep the library's behaviour.
 */
import { StreamState, YamuxStream } from '@chainsafe/libp2p-yamux/stream'

interface WindowFields {
  state: StreamState
  recvWindow: number
  recvWindowCapacity: number
}

let applied: boolean | undefined

/** Installs the rule once per process. False when the library's shape changed (then nothing is patched). */
export function halfWindowUpdates(): boolean {
  if (applied !== undefined) return applied
  const proto = YamuxStream.prototype as unknown as { sendWindowUpdate?: (this: WindowFields) => void }
  const original = proto.sendWindowUpdate
  if (typeof original !== 'function') return (applied = false)
  proto.sendWindowUpdate = function (this: WindowFields): void {
    if (
      this.state === StreamState.Established &&
      typeof this.recvWindow === 'number' &&
      typeof this.recvWindowCapacity === 'number' &&
      this.recvWindowCapacity > this.recvWindow / 2
    )
      return
    original.call(this)
  }
  return (applied = true)
}
