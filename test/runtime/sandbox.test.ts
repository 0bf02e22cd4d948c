import { runtimeSuite } from './suite.ts'

runtimeSuite('sandbox')
