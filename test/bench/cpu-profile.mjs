// Preload for benchmarks: `NODE_OPTIONS=--import=…/cpu-profile.mjs` CPU-profiles a process that
// cannot be started with --cpu-prof (Node 20 refuses it in NODE_OPTIONS). The profile is written to
// $CPU_PROFILE_DIR/<pid>.cpuprofile when the process exits normally (SIGTERM, not SIGKILL), or
// after CPU_PROFILE_DURATION_MS.
import { Session } from 'node:inspector'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'

const session = new Session()
session.connect()
session.post('Profiler.enable')
session.post('Profiler.setSamplingInterval', { interval: 1000 })
// CPU_PROFILE_DELAY_MS: start that long after the process starts (profile steady state, not start-up).
const delay = Number(process.env.CPU_PROFILE_DELAY_MS ?? 0)
if (delay > 0) setTimeout(() => session.post('Profiler.start'), delay).unref()
else session.post('Profiler.start')
let written = false
const write = () => {
  if (written) return
  written = true
  // An in-thread inspector session answers synchronously, so this works inside 'exit'.
  session.post('Profiler.stop', (err, res) => {
    if (!err) writeFileSync(join(process.env.CPU_PROFILE_DIR ?? '.', `${process.pid}.cpuprofile`), JSON.stringify(res.profile))
  })
}
process.on('exit', write)
// CPU_PROFILE_DURATION_MS: write the profile that long after the start, for a process that is
// killed rather than exits (an agent whose stop does not finish before the harness kills it).
const duration = Number(process.env.CPU_PROFILE_DURATION_MS ?? 0)
if (duration > 0) setTimeout(write, delay + duration).unref()
