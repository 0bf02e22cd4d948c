import { type Logger, pino } from 'pino'
import pretty from 'pino-pretty'
import { OrcError } from '../model/index.ts'

const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']

/**
 * The agent's logger: JSON lines on stderr (so `orc up`'s stdout stays for people), pretty when
 * stderr is a terminal. Object events carry `kind`, `ns`, `name`, `rev`, so one filter
 * (`jq 'select(.name=="web")'`) finds everything about an object.
 */
export function createLogger(opts: { level?: string; pretty?: boolean } = {}): Logger {
  const level = opts.level ?? (process.env.ORC_LOG_LEVEL || 'info')
  if (!LOG_LEVELS.includes(level)) {
    const from = opts.level !== undefined ? '--log-level' : 'ORC_LOG_LEVEL'
    throw new OrcError('invalid', `log level ${JSON.stringify(level)} (${from}) is not one of ${LOG_LEVELS.join(', ')}`)
  }
  const usePretty = opts.pretty ?? Boolean(process.stderr.isTTY)
  if (usePretty) {
    return pino({ level }, pretty({ destination: 2, sync: true, ignore: 'pid,hostname', translateTime: 'SYS:HH:MM:ss.l' }))
  }
  return pino({ level, base: { pid: process.pid } }, pino.destination({ dest: 2, sync: true }))
}
