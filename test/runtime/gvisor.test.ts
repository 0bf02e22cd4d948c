import { runtimeSuite } from './suite.ts'

runtimeSuite('gvisor')
