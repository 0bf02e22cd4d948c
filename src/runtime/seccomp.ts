/**
 * The default seccomp policy: allow everything except a denylist of syscalls a pod has no business
 * making (kernel modules, kexec, mount and namespace games, keyrings, ptrace, bpf, perf, clock
 * setting…), modelled on Docker's default profile. New namespaces are refused (unshare/setns and
 * clone with CLONE_NEW* flags); clone3 answers ENOSYS so libc falls back to clone, whose flags a
 * classic BPF filter can inspect. Only x86_64 has a syscall table here; elsewhere seccomp is
 * reported unavailable by detectCapabilities and the filter is not applied.
 */

/** x86_64 syscall numbers of the denylist. */
export const DENIED_SYSCALLS_X86_64: Readonly<Record<string, number>> = {
  _sysctl: 156,
  acct: 163,
  add_key: 248,
  bpf: 321,
  clock_adjtime: 305,
  clock_settime: 227,
  create_module: 174,
  delete_module: 176,
  finit_module: 313,
  get_kernel_syms: 177,
  init_module: 175,
  ioperm: 173,
  iopl: 172,
  kcmp: 312,
  kexec_file_load: 320,
  kexec_load: 246,
  keyctl: 250,
  lookup_dcookie: 212,
  mount: 165,
  move_pages: 279,
  name_to_handle_at: 303,
  nfsservctl: 180,
  open_by_handle_at: 304,
  perf_event_open: 298,
  pivot_root: 155,
  process_vm_readv: 310,
  process_vm_writev: 311,
  ptrace: 101,
  query_module: 178,
  quotactl: 179,
  reboot: 169,
  request_key: 249,
  setns: 308,
  settimeofday: 164,
  swapoff: 168,
  swapon: 167,
  syslog: 103,
  umount2: 166,
  unshare: 272,
  uselib: 134,
  userfaultfd: 323,
  ustat: 136,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
}
const NR_CLONE = 56
const NR_CLONE3 = 435

/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME */
export const CLONE_NAMESPACE_FLAGS = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080]
const NS_MASK = CLONE_NAMESPACE_FLAGS.reduce((a, b) => (a | b) >>> 0, 0)

const AUDIT_ARCH_X86_64 = 0xc000003e
const LD_W_ABS = 0x20
const JEQ_K = 0x15
const JGE_K = 0x35
const JSET_K = 0x45
const RET_K = 0x06
const RET_KILL_PROCESS = 0x80000000
const RET_ALLOW = 0x7fff0000
const RET_ERRNO = 0x00050000
const EPERM = 1
const ENOSYS = 38

type Ins = { code: number; jt: number | string; jf: number | string; k: number; label?: string }

/** Compile the denylist into a classic BPF program (struct sock_filter[], little endian). */
export function buildSeccompBpf(): Buffer {
  const prog: Ins[] = []
  const add = (code: number, k: number, jt: number | string = 0, jf: number | string = 0, label?: string) => prog.push({ code, k, jt, jf, label })
  add(LD_W_ABS, 4) // arch
  add(JEQ_K, AUDIT_ARCH_X86_64, 0, 'kill')
  add(LD_W_ABS, 0) // nr
  add(JGE_K, 0x40000000, 'eperm', 0) // x32 ABI
  for (const nr of Object.values(DENIED_SYSCALLS_X86_64)) add(JEQ_K, nr, 'eperm', 0)
  add(JEQ_K, NR_CLONE3, 'enosys', 0)
  add(JEQ_K, NR_CLONE, 0, 'allow')
  add(LD_W_ABS, 16) // args[0], low 32 bits (little endian)
  add(JSET_K, NS_MASK, 'eperm', 'allow')
  add(RET_K, RET_ALLOW, 0, 0, 'allow')
  add(RET_K, (RET_ERRNO | EPERM) >>> 0, 0, 0, 'eperm')
  add(RET_K, (RET_ERRNO | ENOSYS) >>> 0, 0, 0, 'enosys')
  add(RET_K, RET_KILL_PROCESS, 0, 0, 'kill')
  const at = new Map<string, number>()
  prog.forEach((ins, i) => ins.label && at.set(ins.label, i))
  const buf = Buffer.alloc(prog.length * 8)
  prog.forEach((ins, i) => {
    const off = (j: number | string) => {
      if (typeof j === 'number') return j
      const rel = at.get(j)! - i - 1
      if (rel < 0 || rel > 255) throw new Error(`seccomp jump out of range: ${j}`)
      return rel
    }
    buf.writeUInt16LE(ins.code, i * 8)
    buf.writeUInt8(off(ins.jt), i * 8 + 2)
    buf.writeUInt8(off(ins.jf), i * 8 + 3)
    buf.writeUInt32LE(ins.k >>> 0, i * 8 + 4)
  })
  return buf
}

/** The same policy in OCI runtime-spec form (libseccomp via runc). */
export function ociSeccompProfile(): Record<string, unknown> {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64', 'SCMP_ARCH_X86', 'SCMP_ARCH_X32', 'SCMP_ARCH_AARCH64', 'SCMP_ARCH_ARM'],
    syscalls: [
      { names: Object.keys(DENIED_SYSCALLS_X86_64), action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone3'], action: 'SCMP_ACT_ERRNO', errnoRet: ENOSYS },
      ...CLONE_NAMESPACE_FLAGS.map((flag) => ({
        names: ['clone'],
        action: 'SCMP_ACT_ERRNO',
        errnoRet: EPERM,
        args: [{ index: 0, value: flag, valueTwo: flag, op: 'SCMP_CMP_MASKED_EQ' }],
      })),
    ],
  }
}
