// Types of src/client.js: the plain promise-based client of moat serve's /v1 API (docs/API.md).

/** An error answered by moat: .status is the HTTP status, .code moat's error code, .message moat's. */
export declare class MoatError extends Error {
  constructor(status: number, code: string, message: string)
  readonly name: 'MoatError'
  status: number
  code: string
}

/** True for moat's 404 about the sandbox itself (deleted or unknown), not about a path or process in it. */
export declare function isSandboxGone(e: unknown): boolean

export interface ConnectOptions {
  /** Default: $MOAT_URL, else http://127.0.0.1:7070. */
  baseUrl?: string
  /** Default: $MOAT_API_TOKEN. Sent as `Authorization: Bearer <token>`. */
  token?: string
}

export interface SandboxLimits {
  memory?: string | number
  pids?: number
  cpus?: number
  disk?: string | number
  quotas?: Record<string, number>
}

export interface SandboxNetwork {
  allow?: string[]
  deny?: string[]
  resolve?: string[]
  secrets?: { env: string; hosts: string[] }[]
}

/** moat's manifest (docs/API.md "Manifest"): entries keyed by paths relative to /workspace. */
export type ManifestEntry =
  | { type: 'file'; content: string }
  | { type: 'dir'; children?: Record<string, ManifestEntry> }
  | { type: 'local_file'; src: string }
  | { type: 'local_dir'; src: string }
  | { type: 'git_repo'; repo: string; ref?: string }

export interface MoatManifest {
  root?: '/workspace'
  entries?: Record<string, ManifestEntry>
  environment?: Record<string, string>
}

export interface CreateOptions extends ConnectOptions {
  /** "host" (default), an image of the store (name or digest), "snapshot:<sid>" or a
   * snapshot's name, or an absolute root filesystem directory under the daemon's --allow-host-path. */
  image?: string
  env?: Record<string, string>
  limits?: SandboxLimits
  network?: SandboxNetwork
  manifest?: MoatManifest
  metadata?: Record<string, string>
  timeoutS?: number
  idleTimeoutS?: number
  users?: boolean
}

/** The /v1 sandbox object. */
export interface SandboxInfo {
  id: string
  state: 'running' | 'stopped' | 'paused'
  created_at: string
  image: string
  limits: Record<string, unknown>
  timeout_s: number
  idle_timeout_s: number
  metadata: Record<string, string>
  workspace: string
  users?: boolean
  [k: string]: unknown
}

export interface ExecOptions {
  cwd?: string
  env?: Record<string, string>
  stdin?: string
  timeoutMs?: number
  /** Answer after this long with {running:true, process_id} if the process has not ended; stdin stays open. */
  yieldMs?: number
  /** Per stream. */
  maxOutputBytes?: number
  tty?: boolean
  cols?: number
  rows?: number
}

export interface ExecFinished {
  exit_code: number
  signal: number
  stdout: string
  stderr: string
  duration_ms: number
  timed_out: boolean
  truncated: boolean
  running?: false
  process_id?: number
}

export interface ExecRunning {
  running: true
  process_id: number
  stdout: string
  stderr: string
}

export type ExecResult = ExecFinished | ExecRunning

export interface FileEntry {
  name: string
  /** Absolute inside the sandbox. */
  path: string
  type: 'file' | 'dir' | 'symlink' | 'other'
  size: number
  mode: number
  mtime: number
}

export interface ProcessInfo {
  process_id: number
  cmd: string[]
  running: boolean
  tty: boolean
}

export declare class MoatSandbox {
  /** POST /v1/sandboxes. */
  static create(opts?: CreateOptions): Promise<MoatSandbox>
  /** GET /v1/sandboxes/{id}; a missing sandbox is a MoatError (404). */
  static connect(id: string, opts?: ConnectOptions): Promise<MoatSandbox>
  /** GET /v1/sandboxes (?metadata.K=V for each pair). */
  static list(opts?: ConnectOptions & { metadata?: Record<string, string> }): Promise<SandboxInfo[]>

  /** POST /v1/images; with onProgress the answer is streamed (server-sent events). */
  static pullImage(ref: string, opts?: ConnectOptions & { insecure?: boolean; onProgress?: (p: PullProgress) => void }): Promise<ImageInfo>
  /** POST /v1/images/import: an OCI layout / OCI archive / docker save tar. */
  static importImage(tarBytes: Uint8Array, opts?: ConnectOptions & { name?: string }): Promise<ImageInfo>
  static listImages(opts?: ConnectOptions): Promise<ImageInfo[]>
  /** A name or the manifest digest. */
  static inspectImage(name: string, opts?: ConnectOptions): Promise<ImageInfo & { config?: Record<string, unknown>; layers?: unknown[] }>
  /** 409 while a sandbox or a snapshot uses it. */
  static removeImage(name: string, opts?: ConnectOptions): Promise<void>
  static listSnapshots(opts?: ConnectOptions): Promise<SnapshotInfo[]>
  /** An id or a name. */
  static getSnapshot(ref: string, opts?: ConnectOptions): Promise<SnapshotInfo>
  static deleteSnapshot(ref: string, opts?: ConnectOptions): Promise<void>

  readonly id: string
  readonly baseUrl: string
  /** The last /v1 sandbox object seen (create, connect or refresh). */
  info: SandboxInfo

  refresh(): Promise<SandboxInfo>
  exec(cmd: string | string[], opts?: ExecOptions): Promise<ExecResult>
  writeStdin(processId: number, data?: string, opts?: { yieldMs?: number; close?: boolean }): Promise<ExecResult>
  kill(processId: number, signal?: string | number): Promise<void>
  processes(): Promise<ProcessInfo[]>
  readFile(path: string): Promise<Uint8Array>
  readText(path: string): Promise<string>
  /** Parents are created. */
  writeFile(path: string, data: string | Uint8Array): Promise<void>
  remove(path: string, opts?: { recursive?: boolean }): Promise<void>
  /** With parents. */
  mkdir(path: string): Promise<void>
  list(path?: string, opts?: { depth?: number }): Promise<{ entries: FileEntry[]; truncated: boolean }>
  /** null when the path does not exist (a missing sandbox still throws). */
  stat(path: string): Promise<FileEntry | null>
  exists(path: string): Promise<boolean>
  /** All or nothing; a hunk that does not match is MoatError status 422, code patch_failed. */
  patch(patchText: string): Promise<{ files: { path: string; op: 'add' | 'update' | 'delete' | 'move' | string }[] }>
  image(path: string): Promise<{ mime: string; width: number; height: number; data: string }>
  /** A tar of the workspace. */
  archive(): Promise<Uint8Array>
  /** Replaces the workspace's contents with the tar (optionally gzip/zstd). */
  restoreArchive(tarBytes: Uint8Array): Promise<void>
  /** GET netlog: the gateway's decisions, one object a line. */
  netlog(): Promise<Record<string, unknown>[]>
  /** POST snapshots: the filesystem into a new snapshot (the sandbox keeps running). */
  snapshot(opts?: { name?: string }): Promise<SnapshotInfo>
  /** POST restore: the filesystem replaced by the snapshot's, processes restarted. */
  restore(snapshot: string): Promise<{ sandbox: SandboxInfo; processes: 'restarted' | string }>
  /** POST fork: count (1..32) new sandboxes, all or none; processes are not copied. */
  fork(count?: number): Promise<MoatSandbox[]>
  /** POST pause / resume: the cgroup freezer; 409 when already so. */
  pause(): Promise<SandboxInfo>
  resume(): Promise<SandboxInfo>
  /** Idempotent: a sandbox already gone counts as deleted. */
  delete(): Promise<void>
}

export interface PullProgress {
  layers_done: number
  layers_total: number
  bytes_done: number
  bytes_total: number
}

export interface ImageInfo {
  id: string
  names: string[]
  size: number
  created?: string
  layer_count: number
  [k: string]: unknown
}

export interface SnapshotInfo {
  id: string
  name?: string
  sandbox_id: string
  created_at: string
  /** bytes; null while a btrfs snapshot is still being measured (docs/API.md) */
  size: number | null
  /** btrfs, reflink or copy */
  backend: string
  image: string
}
