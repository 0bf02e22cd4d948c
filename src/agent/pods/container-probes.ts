/**
 * The probes of one container run (one start; a restart makes a new one): the startup probe first,
 * then readiness and liveness side by side. Without a startup probe the container counts as
 * started at once; without a readiness probe it is ready once started.
 */
import type { Clock } from '../../effects/index.ts'
import { type Probe, probeTiming } from '../../model/index.ts'
import { type ProbeCheck, ProbeLoop, type ProbeOutcome } from './prober.ts'

export interface ContainerProbeSpec {
  startupProbe?: Probe
  readinessProbe?: Probe
  livenessProbe?: Probe
}

export interface ContainerProbeEvents {
  started(): void
  startupFailed(why: string): void
  readiness(ready: boolean, why: string): void
  livenessFailed(why: string): void
}

export function hasProbes(c: ContainerProbeSpec): boolean {
  return c.startupProbe !== undefined || c.readinessProbe !== undefined || c.livenessProbe !== undefined
}

function describe(kind: string, last: ProbeOutcome, n: number): string {
  return `${kind} probe ${last.ok ? 'passed' : 'failed'}${n > 1 ? ` ${n} times in a row` : ''}: ${last.output}`
}

export class ContainerProbes {
  private loops: ProbeLoop[] = []
  private stopped = false
  started = false
  ready = false

  constructor(
    private readonly clock: Clock,
    private readonly spec: ContainerProbeSpec,
    /** The check of one probe (tcpSocket / httpGet against this container). */
    private readonly checkOf: (p: Probe) => ProbeCheck,
    private readonly events: ContainerProbeEvents,
    /** Added to each probe's timeout: the time a check needs before it can start (a helper process). */
    private readonly allowanceMs = 0,
  ) {}

  private timing(p: Probe) {
    const t = probeTiming(p)
    return { ...t, timeoutMs: t.timeoutMs + this.allowanceMs }
  }

  start(): this {
    const sp = this.spec.startupProbe
    if (sp === undefined) {
      this.onStarted()
      return this
    }
    const loop = new ProbeLoop(this.clock, this.timing(sp), this.checkOf(sp), {
      changed: (v, last, n) => {
        if (this.stopped) return
        loop.stop()
        if (v === 'passing') this.onStarted()
        else this.events.startupFailed(describe('startup', last, n))
      },
    })
    this.loops.push(loop.start())
    return this
  }

  private onStarted(): void {
    this.started = true
    this.events.started()
    const rp = this.spec.readinessProbe
    if (rp === undefined) {
      this.ready = true
      this.events.readiness(true, 'started')
    } else {
      // Reported when readiness flips, and while not ready when the probe's answer changes (the
      // first check may find no listener yet, a later one an HTTP 404: the status says the latest).
      let said = ''
      const say = (ready: boolean, why: string) => {
        if (this.stopped || `${ready} ${why}` === said) return
        said = `${ready} ${why}`
        this.ready = ready
        this.events.readiness(ready, why)
      }
      this.loops.push(
        new ProbeLoop(this.clock, this.timing(rp), this.checkOf(rp), {
          changed: (v, last) => say(v === 'passing', `readiness probe ${v === 'passing' ? 'passed' : 'failed'}: ${last.output}`),
          checked: (o, v) => {
            if (v !== 'passing' && !o.ok) say(false, `readiness probe failed: ${o.output}`)
          },
        }).start(),
      )
    }
    const lp = this.spec.livenessProbe
    if (lp !== undefined) {
      const loop = new ProbeLoop(this.clock, this.timing(lp), this.checkOf(lp), {
        changed: (v, last, n) => {
          if (this.stopped || v !== 'failing') return
          loop.stop()
          this.events.livenessFailed(describe('liveness', last, n))
        },
      })
      this.loops.push(loop.start())
    }
  }

  stop(): void {
    this.stopped = true
    this.ready = false
    for (const l of this.loops) l.stop()
    this.loops = []
  }
}
