// libp2p uses Promise.withResolvers, which Node 20 lacks (it arrived in Node 22). orc supports
// Node 20 (the Debian/Node LTS many hosts run), so this is loaded before anything else by every
// entry point and by the test setup. See docs/decisions.md.
if (typeof (Promise as any).withResolvers !== 'function') {
  ;(Promise as any).withResolvers = function withResolvers<T>() {
    let resolve!: (v: T | PromiseLike<T>) => void
    let reject!: (e?: unknown) => void
    const promise = new Promise<T>((res, rej) => {
      resolve = res
      reject = rej
    })
    return { promise, resolve, reject }
  }
}

export {}
