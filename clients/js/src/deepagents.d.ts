// Types of moat-sandbox/deepagents: MoatBackend, a Deep Agents sandbox backend.
import type {
  BaseSandbox,
  DeleteResult,
  EditResult,
  ExecuteResponse,
  FileDownloadResponse,
  FileOperationError,
  FileUploadResponse,
  GlobResult,
  GrepResult,
  LsResult,
  ReadRawResult,
  ReadResult,
  WriteResult,
} from 'deepagents'
import type { ConnectOptions, CreateOptions, MoatSandbox } from './client.js'

export interface MoatBackendOptions {
  /** Each execute's time limit in ms (default 30 min; 0 = none). Over it the process group is killed. */
  timeoutMs?: number
  /** execute's output cap in bytes (default 1 MiB); past it `truncated` is true. */
  maxOutputBytes?: number
  /**
   * Where grep and glob search when given no path or "/" (default: the
   * sandbox's workspace, /workspace). "/" searches the whole sandbox.
   */
  searchRoot?: string
  /** close() deletes the sandbox (MoatBackend.create sets it). Default false. */
  owned?: boolean
}

export type MoatBackendCreateOptions = CreateOptions & Omit<MoatBackendOptions, 'owned'>

export interface MoatBackendConnectOptions extends ConnectOptions, Omit<MoatBackendOptions, 'owned'> {}

/** The MIME type the library's tools give a path (text unless a known binary type). */
export declare function mimeTypeOf(path: string): string
/** The protocol's code for a moat error about one file; null when it is not about the file. */
export declare function fileErrorCode(e: unknown): FileOperationError | null
/**
 * A glob (`*`, `?`, `**`, `[...]`, `{a,b}`) as a matcher over '/'-separated
 * paths, with RegExp's `test` (not a RegExp: linear time, whatever the pattern).
 */
export declare function globRegExp(pattern: string): { source: string; test(path: string): boolean }

export declare class MoatBackend extends BaseSandbox {
  constructor(sandbox: MoatSandbox, options?: MoatBackendOptions)
  /** A new sandbox, owned by the backend: close() deletes it. */
  static create(options?: MoatBackendCreateOptions): Promise<MoatBackend>
  /** A backend on an existing sandbox (not owned). */
  static connect(id: string, options?: MoatBackendConnectOptions): Promise<MoatBackend>

  /** The sandbox's id. */
  readonly id: string
  /** The MoatSandbox underneath. */
  readonly sandbox: MoatSandbox
  readonly owned: boolean
  timeoutMs: number
  maxOutputBytes: number
  searchRoot: string

  /** sh -c in the workspace; stderr merged into output in order. */
  execute(command: string): Promise<ExecuteResponse>
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>

  ls(path: string): Promise<LsResult>
  read(filePath: string, offset?: number, limit?: number): Promise<ReadResult>
  readRaw(filePath: string): Promise<ReadRawResult>
  write(filePath: string, content: string): Promise<WriteResult>
  edit(filePath: string, oldString: string, newString: string, replaceAll?: boolean): Promise<EditResult>
  /** Deletes a file or a directory tree in the sandbox (the agent's delete tool). */
  delete(filePath: string): Promise<DeleteResult>
  glob(pattern: string, path?: string): Promise<GlobResult>
  grep(pattern: string, path?: string | null, glob?: string | null, maxCount?: number | null): Promise<GrepResult>

  /** Deletes the sandbox if owned; idempotent. */
  close(): Promise<void>
  /** Deletes the sandbox whether owned or not. */
  deleteSandbox(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}
