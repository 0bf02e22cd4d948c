export { type DataKey, KEY_BYTES, Keyring, type KeyringJson, keyIdOf } from './keyring.ts'
export { hashValue, keyIdOfSealed, keyIdsOf, openSecret, openValue, type Place, resealSecret, sealSecret, sealValue } from './seal.ts'
