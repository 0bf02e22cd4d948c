/** The mesh's events: every part emits on one bus, users subscribe through Mesh.on. */
import { EventEmitter } from 'node:events'
import type { MemberInfo, MemberTransition } from './membership.ts'
import type { SyncResult } from './sync.ts'

export interface MeshEvents {
  /** A member changed liveness state. */
  'member:state': [MemberTransition]
  /** A peer id was admitted (by us or announced by another member). */
  'member:admitted': [MemberInfo]
  'member:removed': [string]
  /** A peer sent garbage; `banned` when its score fell below the threshold. */
  'peer:misbehaved': [{ peerId: string; reason: string; score: number; banned: boolean }]
  'sync:done': [{ peerId: string } & SyncResult]
  /** A heartbeat received from a member or sent: straight on its connection, or by gossip. */
  heartbeat: [{ peerId: string; direction: 'in' | 'out'; path: 'direct' | 'gossip' }]
}

export type MeshListener<K extends keyof MeshEvents> = (...args: MeshEvents[K]) => void

export class MeshEventBus {
  private readonly emitter = new EventEmitter()

  constructor() {
    this.emitter.setMaxListeners(100)
  }

  on<K extends keyof MeshEvents>(event: K, fn: MeshListener<K>): () => void {
    this.emitter.on(event, fn as (...a: unknown[]) => void)
    return () => this.emitter.off(event, fn as (...a: unknown[]) => void)
  }

  emit<K extends keyof MeshEvents>(event: K, ...args: MeshEvents[K]): void {
    this.emitter.emit(event, ...args)
  }
}
