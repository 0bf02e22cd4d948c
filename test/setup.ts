import '../src/polyfill.ts'

// Agents the tests spawn (`orc up`) run without the pod network unless a test asks for it
// (the testbed passes --network on): many agents share this host's network namespace.
process.env.ORC_NETWORK ??= 'off'
