/**
 * A QMP client for more than one command (the block replication of a VM's Volume disk,
 * agent/volumes/blocksync.ts): connect, negotiate capabilities, then `execute` commands with
 * arguments one after another and wait for events. qemu's second QMP monitor (`qmp-block.sock`,
 * qemuArgs) is used, so a sync never holds the monitor a graceful stop needs.
 */
import { connect, type Socket } from 'node:net'
import { OrcError } from '../model/index.ts'

export interface QmpEvent {
  event: string
  data: Record<string, unknown>
}

export class QmpClient {
  private buf = ''
  private readonly waiting: { resolve(v: unknown): void; reject(e: Error): void; what: string }[] = []
  private readonly events: QmpEvent[] = []
  private readonly eventWaiters = new Set<() => void>()
  private closedWith: Error | undefined

  private constructor(private readonly sock: Socket) {}

  /** Connect to the QMP socket and negotiate capabilities (within `timeoutMs`). */
  static async connect(socket: string, timeoutMs = 10_000): Promise<QmpClient> {
    const sock = connect(socket)
    const c = new QmpClient(sock)
    sock.setEncoding('utf8')
    const greeting = new Promise<void>((resolve, reject) => {
      c.waiting.push({ resolve: () => resolve(), reject, what: 'greeting' })
    })
    sock.on('data', (chunk: string) => c.onData(chunk))
    sock.on('error', (err) => c.fail(new OrcError('unavailable', `qmp ${socket}: ${err.message}`)))
    sock.on('close', () => c.fail(new OrcError('unavailable', `qmp ${socket}: qemu closed the socket`)))
    try {
      await withTimeout(greeting, timeoutMs, `qmp ${socket}: no greeting within ${timeoutMs} ms`)
      await c.execute('qmp_capabilities', undefined, timeoutMs)
    } catch (err) {
      c.close()
      throw err
    }
    return c
  }

  private onData(chunk: string): void {
    this.buf += chunk
    if (this.buf.length > 16 << 20) return void this.sock.destroy()
    const { messages, rest } = takeJsonLines(this.buf)
    this.buf = rest
    for (const msg of messages) {
      if (typeof msg.event === 'string') {
        this.events.push({ event: msg.event, data: (msg.data ?? {}) as Record<string, unknown> })
        if (this.events.length > 1000) this.events.shift()
        for (const w of [...this.eventWaiters]) w()
        continue
      }
      const w = this.waiting.shift()
      if (w === undefined) continue
      if ('QMP' in msg || 'return' in msg) w.resolve(msg.return)
      else if ('error' in msg) {
        const e = msg.error as { class?: string; desc?: string }
        w.reject(new OrcError('invalid', `qmp ${w.what}: ${e?.desc ?? JSON.stringify(msg.error)}`))
      } else w.reject(new OrcError('unavailable', `qmp ${w.what}: an answer of an unknown shape`))
    }
  }

  private fail(err: Error): void {
    this.closedWith ??= err
    for (const w of this.waiting.splice(0)) w.reject(err)
    for (const w of [...this.eventWaiters]) w()
  }

  /** Run `command` with `args`; its `return`, or throws with qemu's error. */
  execute(command: string, args?: Record<string, unknown>, timeoutMs = 30_000): Promise<unknown> {
    if (this.closedWith !== undefined) return Promise.reject(this.closedWith)
    const p = new Promise<unknown>((resolve, reject) => this.waiting.push({ resolve, reject, what: command }))
    this.sock.write(`${JSON.stringify(args === undefined ? { execute: command } : { execute: command, arguments: args })}\n`)
    return withTimeout(p, timeoutMs, `qmp ${command}: no answer within ${timeoutMs} ms`)
  }

  /** The first event (seen since connecting, or to come) that `match` accepts; throws after `timeoutMs` or when qemu closes the socket. */
  async waitEvent(match: (e: QmpEvent) => boolean, timeoutMs: number, what: string): Promise<QmpEvent> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = this.events.find(match)
      if (found !== undefined) return found
      if (this.closedWith !== undefined) throw this.closedWith
      const left = deadline - Date.now()
      if (left <= 0) throw new OrcError('unavailable', `qmp: no ${what} within ${timeoutMs} ms`)
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(left, 1000))
        function done() {
          clearTimeout(t)
          waiters.delete(done)
          resolve()
        }
        const waiters = this.eventWaiters
        waiters.add(done)
      })
    }
  }

  close(): void {
    this.sock.destroy()
  }
}

/** The complete JSON lines at the start of `buf` (blank and unparsable ones skipped), and what is left after them. */
export function takeJsonLines(buf: string): { messages: Record<string, unknown>[]; rest: string } {
  const messages: Record<string, unknown>[] = []
  let rest = buf
  for (let i = rest.indexOf('\n'); i >= 0; i = rest.indexOf('\n')) {
    const line = rest.slice(0, i).trim()
    rest = rest.slice(i + 1)
    if (line === '') continue
    try {
      messages.push(JSON.parse(line) as Record<string, unknown>)
    } catch {}
  }
  return { messages, rest }
}

function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let t: NodeJS.Timeout | undefined
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      t = setTimeout(() => reject(new OrcError('unavailable', message)), ms)
    }),
  ]).finally(() => clearTimeout(t))
}
