/**
 * Progress of long operations (join sync, image import, rollout): on a terminal one line that
 * updates in place with a spinner; anywhere else (pipes, logs, CI) each distinct step as a plain
 * line, so output stays greppable.
 */
const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏']

export interface Progress {
  /** The current step; on a TTY it replaces the previous one. */
  update(text: string): void
  /** The final line (kept on screen). */
  done(text?: string): void
}

export interface ProgressSink {
  write(text: string): void
  isTTY: boolean
}

export function createProgress(sink: ProgressSink, opts: { intervalMs?: number } = {}): Progress {
  let last = ''
  if (!sink.isTTY) {
    return {
      update(text) {
        if (text === last) return
        last = text
        sink.write(`${text}\n`)
      },
      done(text) {
        if (text !== undefined && text !== last) sink.write(`${text}\n`)
        last = ''
      },
    }
  }
  let frame = 0
  let timer: NodeJS.Timeout | undefined
  const draw = () => sink.write(`\r\x1b[2K${FRAMES[frame++ % FRAMES.length]} ${last}`)
  return {
    update(text) {
      last = text
      draw()
      timer ??= setInterval(draw, opts.intervalMs ?? 100)
      timer.unref?.()
    },
    done(text) {
      if (timer !== undefined) clearInterval(timer)
      timer = undefined
      sink.write(`\r\x1b[2K${text ?? last}\n`)
      last = ''
    },
  }
}
