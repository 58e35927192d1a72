// Types of src/agentsManifest.js: an Agents SDK Manifest checked and planned for moat (no moat calls).
import type { Manifest, Entry } from '@openai/agents/sandbox'

export declare const WORKSPACE: '/workspace'

export type PlanOp =
  | { op: 'dir'; path: string; mode?: number }
  | { op: 'file'; path: string; bytes: Uint8Array; mode?: number }
  | { op: 'git'; path: string; repo: string; ref?: string }

/** Throws SandboxUnsupportedFeatureError for a root other than /workspace, users, groups or extraPathGrants. */
export declare function checkManifestFeatures(manifest: Manifest): void

/** Reads local sources on this host; throws (naming the entry) before anything is written anywhere. */
export declare function planEntries(entries: Record<string, Entry>, opts: { localBase: string }): Promise<PlanOp[]>

/** moat's create-time manifest, plus the files to upload and the modes to set after it. */
export declare function createRequest(ops: PlanOp[]): {
  manifest: { root: '/workspace'; entries: Record<string, unknown> }
  uploads: Extract<PlanOp, { op: 'file' }>[]
  chmods: { path: string; mode: number }[]
}
