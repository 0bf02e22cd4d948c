import { runtimeSuite } from './suite.ts'

runtimeSuite('oci')
