// Types of src/agents.js: moat as a sandbox provider of the OpenAI Agents SDK (@openai/agents 0.20).
import type { Editor, ToolOutputImage } from '@openai/agents'
import type {
  Manifest, SandboxClient, SandboxClientCreateArgs, SandboxSession, SandboxSessionState, ExecCommandArgs,
  SandboxExecResult, WriteStdinArgs, ViewImageArgs, ReadFileArgs, ListDirectoryArgs, SandboxDirectoryEntry,
  MaterializeEntryArgs, WorkspaceArchiveData,
} from '@openai/agents/sandbox'
import type { MoatSandbox, SandboxLimits, SandboxNetwork } from './client.js'

/** Per-sandbox settings: the client's defaults, or a run's `sandbox.options`. */
export interface MoatSandboxOptions {
  /** "host" (default) or a root filesystem directory under the daemon's --allow-host-path. */
  image?: string
  limits?: SandboxLimits
  /** Egress allowlist (needs the daemon's --net-allow); also what a git_repo entry is cloned through. */
  network?: SandboxNetwork
  metadata?: Record<string, string>
  timeoutS?: number
  idleTimeoutS?: number
  [k: string]: unknown
}

export interface MoatSandboxClientOptions extends MoatSandboxOptions {
  /** Default: $MOAT_URL, else http://127.0.0.1:7070. */
  baseUrl?: string
  /** Default: $MOAT_API_TOKEN. Never put into session state. */
  token?: string
  /** Where relative local_file / local_dir sources resolve, and what they must stay under. Default: process.cwd(). */
  localSourceBaseDir?: string
}

export interface MoatSessionState extends SandboxSessionState {
  sandboxId: string
}

/** What serializeSessionState returns: no token, no URL, no environment values. */
export interface MoatSerializedSessionState {
  sandboxId: string
  manifest: Record<string, unknown>
  [k: string]: unknown
}

export declare class MoatSandboxSession implements SandboxSession<MoatSessionState> {
  state: MoatSessionState
  /** The underlying plain client. */
  readonly sandbox: MoatSandbox
  readonly id: string
  supportsPty(): true
  /** No I/O; runAs is refused (SandboxUnsupportedFeatureError). */
  createEditor(runAs?: string): Editor & { canAccessPathForEdit(path: string): boolean }
  running(): Promise<boolean>
  exec(args: ExecCommandArgs): Promise<SandboxExecResult>
  execCommand(args: ExecCommandArgs): Promise<string>
  writeStdin(args: WriteStdinArgs): Promise<string>
  viewImage(args: ViewImageArgs): Promise<ToolOutputImage>
  readFile(args: ReadFileArgs): Promise<Uint8Array>
  listDir(args: ListDirectoryArgs): Promise<SandboxDirectoryEntry[]>
  pathExists(path: string, runAs?: string): Promise<boolean>
  directoryExists(path: string, runAs?: string): Promise<boolean>
  materializeEntry(args: MaterializeEntryArgs): Promise<void>
  applyManifest(manifest: Manifest, runAs?: string): Promise<void>
  /** A tar of the workspace (GET archive). */
  persistWorkspace(): Promise<Uint8Array>
  /** PUT archive. */
  hydrateWorkspace(data: WorkspaceArchiveData): Promise<void>
  /** moat's same-host fast path (not the SDK's contract): the filesystem into a daemon
   * snapshot; start a sandbox from it with the client option image: `snapshot:<id>`. */
  snapshotWorkspace(opts?: { name?: string }): Promise<import('./client.js').SnapshotInfo>
  /** Deletes the sandbox; idempotent, one DELETE however often called. */
  delete(): Promise<void>
  /** Alias of delete. */
  close(): Promise<void>
}

// States are typed as the SDK's (what the runner hands over); at run time they must carry sandboxId.
export declare class MoatSandboxClient implements SandboxClient<MoatSandboxOptions, SandboxSessionState> {
  constructor(opts?: MoatSandboxClientOptions)
  readonly backendId: 'moat'
  readonly baseUrl: string
  readonly defaults: MoatSandboxOptions
  readonly localSourceBaseDir: string
  create(args?: SandboxClientCreateArgs<MoatSandboxOptions> | Manifest, manifestOptions?: MoatSandboxOptions): Promise<MoatSandboxSession>
  /** Reattaches through this client's own baseUrl and token; UserError when the sandbox is gone or stopped. */
  resume(state: SandboxSessionState): Promise<MoatSandboxSession>
  serializeSessionState(state: SandboxSessionState): Promise<MoatSerializedSessionState>
  deserializeSessionState(state: Record<string, unknown>): Promise<MoatSessionState>
  /** false: moat keeps no snapshots. */
  canPersistOwnedSessionState(state?: SandboxSessionState): false
  /** Idempotent. */
  delete(state: SandboxSessionState): Promise<void>
}
