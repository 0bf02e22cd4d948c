// Entry of the bundled CLI (scripts/build.mjs): the polyfill first, then the command.
import '../polyfill.ts'
import { main } from './main.ts'

await main(process.argv.slice(2))
