import '../src/polyfill.ts'
