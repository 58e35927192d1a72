// MoatSandboxClient: moat as a sandbox provider of the OpenAI Agents SDK
// (@openai/agents 0.20, a peer dependency). A thin client: every operation
// is one or a few calls of MoatSandbox (src/client.js) on moat's /v1 API,
// and all isolation stays in the daemon.
//
//   SDK member                      moat call
//   client.create(manifest)         POST /v1/sandboxes (+ PUT files for binary/large files)
//   client.resume(state)            GET /v1/sandboxes/{id}
//   client.delete / session.delete  DELETE /v1/sandboxes/{id} (404 = already gone)
//   session.execCommand             POST exec (yield_ms = yieldTimeMs)
//   session.writeStdin              POST processes/{id}/stdin ("\u0003": DELETE processes/{id}?signal=INT)
//   editor.createFile/updateFile/   POST patch, one file per call (all or nothing in moat)
//         deleteFile
//   session.viewImage               GET image
//   session.readFile/listDir/...    GET files, files/list, files/stat
//   session.persistWorkspace        GET archive (tar bytes, the SDK's contract)
//   session.hydrateWorkspace        PUT archive
//   session.snapshotWorkspace       POST snapshots (moat's, same host; create
//                                   with image "snapshot:<id>" starts from it)
//
// Session ids of write_stdin are moat's process ids (small integers).
// See docs/agents-sdk.md.
import nodePath from 'node:path'
import { UserError } from '@openai/agents'
import { normalizeSandboxClientCreateArgs, Manifest, SandboxUnsupportedFeatureError, SandboxConfigurationError,
  SandboxWorkspaceReadNotFoundError } from '@openai/agents/sandbox'
import { serializeManifestRecord, deserializeManifest } from '@openai/agents-core/sandbox/internal'
import { MoatSandbox, MoatError, isSandboxGone } from './client.js'
import { checkManifestFeatures, planEntries, createRequest, WORKSPACE } from './agentsManifest.js'
import { formatExecResponse, truncateOutput } from './execOutput.js'

const DEFAULT_EXEC_YIELD_MS = 10_000 // the exec_command tool's default
const DEFAULT_STDIN_YIELD_MS = 250 // the write_stdin tool's default
const CREATE_OPTIONS = ['image', 'limits', 'network', 'metadata', 'timeoutS', 'idleTimeoutS']
const DEFAULT_MODE = { dir: 0o755, file: 0o644 } // what moat gives new files and directories
const MAX_YIELD_MS = 240_000

const yieldOf = (ms, dflt) => Math.min(MAX_YIELD_MS, Math.max(1, Math.floor(ms ?? dflt)))

function refuseRunAs(runAs, what) {
  if (runAs !== undefined && runAs !== null && runAs !== '') {
    throw new SandboxUnsupportedFeatureError(`moat: ${what}: runAs ${JSON.stringify(runAs)} is not supported (a moat sandbox has one user)`,
      { provider: 'moat', feature: 'runAs' })
  }
}

/** A path of the SDK (relative, or absolute under /workspace) as moat takes it. */
function moatPath(p) {
  if (typeof p !== 'string' || p === '') throw new UserError('moat: a path is required')
  if (p === WORKSPACE) return '.'
  if (p.startsWith(`${WORKSPACE}/`)) return p.slice(WORKSPACE.length + 1) || '.'
  return p
}

/** moat's absolute answer path as the SDK shows it (workspace-relative when inside). */
function logicalPath(p) {
  if (p === WORKSPACE) return ''
  return p.startsWith(`${WORKSPACE}/`) ? p.slice(WORKSPACE.length + 1) : p
}

/** argv for exec_command's shell/login: login shells are bash -lc when the image has bash (as the SDK's own sandboxes). */
function shellArgv({ cmd, shell, login = true }) {
  if (typeof cmd !== 'string' || cmd === '') throw new UserError('moat: exec_command needs a command')
  if (shell) return [shell, login ? '-lc' : '-c', cmd]
  if (!login) return ['/bin/sh', '-c', cmd]
  return ['/bin/sh', '-c', '[ -x /bin/bash ] && exec /bin/bash -lc "$1"; exec /bin/sh -lc "$1"', 'sh', cmd]
}

async function applyOps(sb, ops, chmods) {
  for (const o of ops) {
    if (o.op === 'dir') await sb.mkdir(o.path)
    else await sb.writeFile(o.path, o.bytes)
  }
  // after the writes, so that a read-only directory is filled first
  const kind = new Map(ops.map((o) => [o.path, o.op]))
  const args = []
  for (const c of chmods) {
    const dflt = kind.get(c.path) === 'file' ? DEFAULT_MODE.file : DEFAULT_MODE.dir
    if (c.mode !== dflt) args.push(c.mode.toString(8), c.path)
  }
  if (args.length) {
    const r = await sb.exec(['/bin/sh', '-c', 'while [ $# -gt 1 ]; do chmod -- "$1" "$2" || exit 1; shift 2; done', 'sh', ...args])
    if (r.exit_code !== 0) throw new SandboxConfigurationError(`moat: setting the manifest's permissions failed: ${r.stderr.trim()}`)
  }
}

/** The editor behind the Filesystem capability's apply_patch: each operation is one moat patch. */
class MoatEditor {
  constructor(session) {
    this._session = session
  }

  /** No I/O: moat decides at patch time; here only paths that cannot be moat paths are refused. */
  canAccessPathForEdit(path) {
    try {
      editPath(path)
      return true
    } catch {
      return false
    }
  }

  async createFile(op) {
    const p = editPath(op.path)
    // Add File: every "+" line is followed by a newline, so the file ends
    // with one (Codex's apply_patch and moat's /patch; the SDK's own
    // applyDiff leaves the last line without it)
    await this._patch(`*** Add File: ${p}\n${diffBody(op.diff, 'create', p)}`)
    return { status: 'completed', output: `Created ${p}` }
  }

  async updateFile(op) {
    const p = editPath(op.path)
    const to = op.moveTo ? editPath(op.moveTo) : null
    const body = diffBody(op.diff, 'update', p)
    // (a Move to with an empty diff is a pure rename: moat's /patch keeps the bytes)
    await this._patch(`*** Update File: ${p}\n${to ? `*** Move to: ${to}\n` : ''}${body}`)
    return { status: 'completed', output: to ? `Moved ${p} to ${to}` : `Updated ${p}` }
  }

  async deleteFile(op) {
    const p = editPath(op.path)
    await this._patch(`*** Delete File: ${p}\n`)
    return { status: 'completed', output: `Deleted ${p}` }
  }

  async _patch(section) {
    try {
      await this._session.sandbox.patch(`*** Begin Patch\n${section}*** End Patch\n`)
    } catch (e) {
      // moat's message (422: the hunk and file that did not match; nothing
      // was changed) is what the model gets back
      if (e instanceof MoatError) throw new UserError(`apply_patch failed: ${e.message}`)
      throw e
    }
  }
}

function editPath(path) {
  if (typeof path !== 'string' || path.trim() === '') throw new UserError('apply_patch: a path is required')
  if (/[\n\r\0]/.test(path)) throw new UserError(`apply_patch: path ${JSON.stringify(path)} has a newline or NUL`)
  const p = moatPath(path.trim())
  if (p === '.') throw new UserError(`apply_patch: ${path} is the workspace itself, not a file`)
  return p
}

/**
 * The operation's V4A diff as the body of one patch section. Only diff lines
 * are let through, so that a diff cannot add sections (files) of its own.
 */
function diffBody(diff, kind, path) {
  const text = diff ?? ''
  if (text === '') return ''
  const lines = text.endsWith('\n') ? text.slice(0, -1).split('\n') : text.split('\n')
  for (const [i, line] of lines.entries()) {
    const ok = kind === 'create'
      ? line.startsWith('+')
      : line === '' || /^[ +\-]/.test(line) || line.startsWith('@@') || line === '*** End of File'
    if (!ok) {
      throw new UserError(`apply_patch: ${path}: diff line ${i + 1} ${JSON.stringify(line.slice(0, 80))} is not a ${kind === 'create' ? '"+" line' : 'diff line (" ", "-", "+", "@@")'}`)
    }
  }
  return `${lines.join('\n')}\n`
}

export class MoatSandboxSession {
  /** Made by MoatSandboxClient.create / resume. sandbox: a MoatSandbox. */
  constructor(sandbox, state, { localSourceBaseDir } = {}) {
    Object.defineProperty(this, 'sandbox', { value: sandbox, enumerable: false })
    this.state = state
    this._localBase = localSourceBaseDir ?? process.cwd()
    this._tty = new Map() // process id -> tty, for "\u0003" on write_stdin
    this._deleted = null
  }

  get id() {
    return this.sandbox.id
  }

  supportsPty() {
    return true
  }

  createEditor(runAs) {
    refuseRunAs(runAs, 'createEditor')
    return new MoatEditor(this)
  }

  async running() {
    try {
      return (await this.sandbox.refresh()).state === 'running'
    } catch (e) {
      if (isSandboxGone(e)) return false
      throw e
    }
  }

  /** The structured result; execCommand is its text. */
  async exec(args) {
    refuseRunAs(args.runAs, 'exec_command')
    const t0 = Date.now()
    const tty = Boolean(args.tty)
    // moat's yield_ms 0 would mean "wait for the end": at least 1 ms; at
    // most MAX_YIELD_MS, within node fetch's 300 s wait for an answer's head
    const yieldMs = yieldOf(args.yieldTimeMs, DEFAULT_EXEC_YIELD_MS)
    let r
    try {
      r = await this.sandbox.exec(shellArgv(args), { cwd: args.workdir || undefined, yieldMs, tty })
    } catch (e) {
      // a refused request (bad workdir, a path moat forbids) is told to the
      // model as a failed command: the SDK shows a thrown error to it only
      // as "An error occurred while running the tool"
      if (!(e instanceof MoatError) || (e.status !== 400 && e.status !== 403)) throw e
      r = { exit_code: 1, stdout: '', stderr: `moat: ${e.message}\n` }
    }
    if (r.running) this._tty.set(r.process_id, tty)
    return this._result(r, t0, args.maxOutputTokens)
  }

  async execCommand(args) {
    return formatExecResponse(await this.exec(args))
  }

  async writeStdin(args) {
    const t0 = Date.now()
    const pid = args.sessionId
    let chars = args.chars ?? ''
    try {
      if (chars.includes('\u0003') && !(await this._isTty(pid))) {
        // no terminal to turn ^C into SIGINT: send it (as the SDK's sandboxes do)
        await this.sandbox.kill(pid, 'INT')
        chars = chars.split('\u0003').join('')
      }
      const yieldMs = yieldOf(args.yieldTimeMs, DEFAULT_STDIN_YIELD_MS)
      const r = await this.sandbox.writeStdin(pid, chars, { yieldMs })
      return formatExecResponse(this._result(r, t0, args.maxOutputTokens))
    } catch (e) {
      if (e instanceof MoatError && !isSandboxGone(e) && (e.status === 404 || e.status === 409)) {
        this._tty.delete(pid)
        return formatExecResponse({ output: `write_stdin failed: session not found: ${pid} (${e.message})`, wallTimeSeconds: (Date.now() - t0) / 1000, exitCode: 1 })
      }
      throw e
    }
  }

  async _isTty(pid) {
    if (this._tty.has(pid)) return this._tty.get(pid)
    const p = (await this.sandbox.processes()).find((x) => x.process_id === pid)
    return Boolean(p?.tty)
  }

  _result(r, t0, maxOutputTokens) {
    // moat keeps stdout and stderr apart: the model gets stdout, then stderr
    const out = truncateOutput(`${r.stdout ?? ''}${r.stderr ?? ''}`, maxOutputTokens)
    const res = { output: out.text, stdout: r.stdout ?? '', stderr: r.stderr ?? '', wallTimeSeconds: (Date.now() - t0) / 1000 }
    if (out.originalTokenCount !== undefined) res.originalTokenCount = out.originalTokenCount
    if (r.running) res.sessionId = r.process_id
    else {
      res.exitCode = r.exit_code
      this._tty.delete(r.process_id)
    }
    return res
  }

  async viewImage(args) {
    refuseRunAs(args.runAs, 'view_image')
    let img
    try {
      img = await this.sandbox.image(moatPath(args.path))
    } catch (e) {
      // worded so that the SDK's view_image tells the model what happened
      if (!(e instanceof MoatError) || isSandboxGone(e)) throw e
      if (e.status === 404) throw new UserError(`Image file not found: ${args.path}`)
      if (e.code === 'is_directory') throw new UserError(`Image path is not a file: ${args.path}`)
      if (e.status === 413) throw new UserError(`Image file exceeds the 10 MB limit: ${args.path}`)
      if (e.status === 415) throw new UserError(`Unsupported image format for view_image: ${args.path} (moat reads PNG, JPEG, GIF and WebP)`)
      throw new UserError(`view_image ${args.path}: ${e.message}`)
    }
    return { type: 'image', image: { data: new Uint8Array(Buffer.from(img.data, 'base64')), mediaType: img.mime } }
  }

  async readFile(args) {
    refuseRunAs(args.runAs, 'readFile')
    let bytes
    try {
      bytes = await this.sandbox.readFile(moatPath(args.path))
    } catch (e) {
      if (e instanceof MoatError && e.status === 404 && !isSandboxGone(e)) {
        throw new SandboxWorkspaceReadNotFoundError(`moat: no file ${args.path} in the sandbox`, { path: args.path })
      }
      throw e
    }
    return typeof args.maxBytes === 'number' && bytes.length > args.maxBytes ? bytes.subarray(0, args.maxBytes) : bytes
  }

  async listDir(args) {
    refuseRunAs(args.runAs, 'listDir')
    let entries
    try {
      ;({ entries } = await this.sandbox.list(moatPath(args.path), { depth: 1 }))
    } catch (e) {
      // the SDK's capabilities (Skills) treat this error as "not there"
      if (e instanceof MoatError && e.status === 404 && !isSandboxGone(e)) {
        throw new SandboxWorkspaceReadNotFoundError(`moat: no directory ${args.path} in the sandbox`, { path: args.path })
      }
      throw e
    }
    return entries.map((e) => ({ name: e.name, path: logicalPath(e.path), type: e.type === 'file' || e.type === 'dir' ? e.type : 'other' }))
  }

  async pathExists(path, runAs) {
    refuseRunAs(runAs, 'pathExists')
    return await this.sandbox.exists(moatPath(path))
  }

  async directoryExists(path, runAs) {
    refuseRunAs(runAs, 'directoryExists')
    return (await this.sandbox.stat(moatPath(path)))?.type === 'dir'
  }

  /** One entry into the live sandbox (a provided session whose manifest grows; Skills). */
  async materializeEntry(args) {
    refuseRunAs(args.runAs, 'materializeEntry')
    await this._materialize({ [moatPath(args.path)]: args.entry })
  }

  async applyManifest(manifest, runAs) {
    refuseRunAs(runAs, 'applyManifest')
    const m = manifest instanceof Manifest ? manifest : new Manifest(manifest)
    checkManifestFeatures(m)
    await this._materialize(m.entries)
  }

  async _materialize(entries) {
    // everything is read and checked before the first write
    const ops = await planEntries(entries, { localBase: this._localBase })
    const git = ops.find((o) => o.op === 'git')
    if (git) {
      throw new SandboxUnsupportedFeatureError(`moat: manifest.entries[${JSON.stringify(git.path)}]: a git_repo is cloned when the sandbox is created, not into a running one`,
        { provider: 'moat', feature: 'git_repo', path: git.path })
    }
    await applyOps(this.sandbox, ops, ops.filter((o) => o.mode !== undefined).map((o) => ({ path: o.path, mode: o.mode })))
  }

  /**
   * The SDK's contract: the workspace as tar bytes (workspace-relative
   * names), which the SDK's snapshot store keeps and may hand to another
   * host. Always bytes: a moat snapshot is a reference valid on its daemon
   * only (see snapshotWorkspace).
   */
  async persistWorkspace() {
    return await this.sandbox.archive()
  }

  /**
   * moat's same-host fast path, outside the SDK's contract: the sandbox's
   * whole filesystem into a daemon snapshot (a layer, not a copy of the
   * bytes), returned as {id, name?, ...}. A later sandbox starts from it
   * with the client option image: `snapshot:<id>` (or the snapshot's name).
   */
  async snapshotWorkspace(opts = {}) {
    return await this.sandbox.snapshot(opts)
  }

  async hydrateWorkspace(data) {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data instanceof ArrayBuffer ? new Uint8Array(data) : data
    await this.sandbox.restoreArchive(bytes)
  }

  /**
   * Deletes the sandbox, once: the runner's cleanup calls this for a sandbox
   * it owns (there is no stop or shutdown, so it is the only call made).
   */
  async delete() {
    this._deleted ??= this.sandbox.delete().catch((e) => {
      this._deleted = null
      throw e
    })
    await this._deleted
  }

  /** For people: the same as delete (the runner does not call it when delete exists). */
  async close() {
    await this.delete()
  }
}

export class MoatSandboxClient {
  backendId = 'moat'
  #token

  /**
   * opts: {baseUrl?, token?, image?, limits?, network?, metadata?,
   * timeoutS?, idleTimeoutS?, localSourceBaseDir?}. baseUrl defaults to
   * $MOAT_URL, else http://127.0.0.1:7070; token to $MOAT_API_TOKEN.
   */
  constructor(opts = {}) {
    const env = process.env
    this.baseUrl = String(opts.baseUrl ?? env.MOAT_URL ?? 'http://127.0.0.1:7070').replace(/\/+$/, '')
    this.#token = opts.token ?? env.MOAT_API_TOKEN ?? undefined
    this.defaults = {}
    for (const k of CREATE_OPTIONS) if (opts[k] !== undefined) this.defaults[k] = opts[k]
    this.localSourceBaseDir = nodePath.resolve(opts.localSourceBaseDir ?? process.cwd())
  }

  get #conn() {
    return { baseUrl: this.baseUrl, token: this.#token ?? '' }
  }

  async create(args, manifestOptions) {
    const { manifest, options, snapshot } = normalizeSandboxClientCreateArgs(args, manifestOptions)
    if (snapshot && snapshot.type !== 'noop') {
      throw new SandboxUnsupportedFeatureError(`moat: snapshot ${JSON.stringify(snapshot.type)} is not supported (the provider does not persist through the SDK's snapshot stores: leave it out or use {type: "noop"}; persistWorkspace gives the tar, snapshotWorkspace a moat snapshot)`,
        { provider: 'moat', feature: 'snapshot' })
    }
    const o = { ...this.defaults }
    for (const [k, v] of Object.entries(options ?? {})) {
      if (!CREATE_OPTIONS.includes(k)) throw new UserError(`moat: unknown sandbox option ${JSON.stringify(k)} (known: ${CREATE_OPTIONS.join(', ')})`)
      if (v !== undefined) o[k] = v
    }
    checkManifestFeatures(manifest)
    const ops = await planEntries(manifest.entries, { localBase: this.localSourceBaseDir })
    const req = createRequest(ops)
    const environment = await manifest.resolveEnvironment()
    const sb = await MoatSandbox.create({ ...this.#conn, ...o, env: environment, manifest: req.manifest })
    try {
      await applyOps(sb, req.uploads, req.chmods)
    } catch (e) {
      // nothing half-made is left behind
      await sb.delete().catch(() => {})
      throw e
    }
    return new MoatSandboxSession(sb, { manifest, sandboxId: sb.id, environment, workspaceReady: true },
      { localSourceBaseDir: this.localSourceBaseDir })
  }

  /** Reattach to the live sandbox of state, through this client's own baseUrl and token. */
  async resume(state) {
    const id = sandboxIdOf(state)
    let sb
    try {
      sb = await MoatSandbox.connect(id, this.#conn)
    } catch (e) {
      if (e instanceof MoatError && e.status === 404) {
        throw new UserError(`moat: sandbox ${id} is gone from ${this.baseUrl}; it cannot be resumed (its session state is stale: create a new sandbox)`)
      }
      throw e
    }
    if (sb.info.state !== 'running') {
      throw new UserError(`moat: sandbox ${id} on ${this.baseUrl} is ${sb.info.state}; it cannot be resumed (delete it and create a new one)`)
    }
    return new MoatSandboxSession(sb, state, { localSourceBaseDir: this.localSourceBaseDir })
  }

  /** The sandbox's id and manifest; never the token, the URL or environment values (moat keeps the env). */
  async serializeSessionState(state) {
    const record = serializeManifestRecord(state.manifest)
    return { sandboxId: sandboxIdOf(state), manifest: { ...record, environment: {} } }
  }

  async deserializeSessionState(obj) {
    if (!obj || typeof obj !== 'object') throw new UserError('moat: session state must be an object')
    const state = { sandboxId: sandboxIdOf(obj), manifest: deserializeManifest(obj.manifest ?? {}) }
    for (const k of ['snapshot', 'snapshotFingerprint', 'snapshotFingerprintVersion', 'workspaceReady', 'exposedPorts']) {
      if (obj[k] !== undefined) state[k] = obj[k]
    }
    return state
  }

  /** moat keeps no snapshots: a run's owned sandbox is deleted at its end, so its state is not worth keeping. */
  canPersistOwnedSessionState() {
    return false
  }

  /** Idempotent. */
  async delete(state) {
    const id = sandboxIdOf(state)
    let sb
    try {
      sb = await MoatSandbox.connect(id, this.#conn)
    } catch (e) {
      if (e instanceof MoatError && e.status === 404) return
      throw e
    }
    await sb.delete()
  }
}

function sandboxIdOf(state) {
  const id = state?.sandboxId
  if (typeof id !== 'string' || !/^[a-z0-9]{1,64}$/.test(id)) {
    throw new UserError(`moat: session state has no valid sandboxId (got ${JSON.stringify(id)?.slice(0, 80)})`)
  }
  return id
}
