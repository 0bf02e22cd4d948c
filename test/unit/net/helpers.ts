export * from '../../../src/net/index.ts'

import { isOrcError, type OrcErrorCode } from '../../../src/model/index.ts'

/** assert.throws validator: an OrcError with this code. */
export function isOrcErrorLike(code: OrcErrorCode): (err: unknown) => boolean {
  return (err) => isOrcError(err, code)
}

export { seededBytes as seededRandom } from '../../helpers/random.ts'
