declare module 'xsalsa20' {
  const xsalsa20: (nonce: Uint8Array, key: Uint8Array) => { update(input: Uint8Array, output?: Uint8Array): Uint8Array; finalize(): void }
  export default xsalsa20
}
