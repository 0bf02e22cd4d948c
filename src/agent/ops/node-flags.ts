/**
 * V8 flags every `orc` process is started with (and, below, its environment): the `bin/orc.mjs` shebang, the `orc` script that
 * install.sh writes, and scripts/run.sh all pass exactly these (a test keeps them in step).
 *
 * `--max-semi-space-size=2`: V8's young generation otherwise grows to 2 × 16 MB during a store load
 * and stays committed for good; capped at 2 × 2 MB the agent's RSS after a 10k-object cold start is
 * ~25 MB lower. 1 MB saved 2 MB more but cost ~40 % of single-write API throughput (more, earlier
 * promotions); 2 MB measured level with no flag (docs/benchmarks.md, docs/decisions.md). It can
 * only be set on the node command line: V8 sizes the young generation when the process starts.
 */
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=2']

/**
 * Environment every `orc` process is started with, by the same launchers (`env NAME=VALUE node …`;
 * the script install.sh writes exports it, since a minimal PATH may hold no `env`).
 *
 * `MALLOC_ARENA_MAX=2`: glibc gives each thread that allocates (libuv's pool, LevelDB's compaction,
 * V8's helpers) an arena of its own, each keeping freed memory; an idle agent held ~9 MB there.
 * Two arenas measured 9 MB lower RSS (docs/benchmarks.md). glibc reads it at process start only.
 */
export const NODE_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' }

/** The launchers' `NAME=VALUE …` words for NODE_ENV. */
export const NODE_ENV_WORDS: readonly string[] = Object.entries(NODE_ENV).map(([k, v]) => `${k}=${v}`)
