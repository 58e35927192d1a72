// MoatSandbox: a plain promise-based client of moat serve's /v1 API
// (docs/API.md). One method per API call, answers returned as moat sends
// them; moat's errors become MoatError with moat's own code and message.
// No retries and no caching: every call is one request (node's fetch keeps
// the connection alive between them).

const DEFAULT_URL = 'http://127.0.0.1:7070'

/** An error answered by moat: {"error":{"code","message"}} with its HTTP status. */
export class MoatError extends Error {
  constructor(status, code, message) {
    super(message)
    this.name = 'MoatError'
    this.status = status
    this.code = code
  }
}

function resolveConn(opts = {}) {
  const env = globalThis.process?.env ?? {}
  const baseUrl = String(opts.baseUrl ?? env.MOAT_URL ?? DEFAULT_URL).replace(/\/+$/, '')
  let u
  try {
    u = new URL(baseUrl)
  } catch {
    throw new TypeError(`moat: baseUrl ${JSON.stringify(baseUrl)} is not a URL`)
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new TypeError(`moat: baseUrl ${JSON.stringify(baseUrl)} must be http:// or https://`)
  }
  const token = opts.token ?? env.MOAT_API_TOKEN ?? null
  return { baseUrl, token: token === '' ? null : token }
}

function query(params) {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.append(k, String(v))
  const s = q.toString()
  return s ? `?${s}` : ''
}

/** Drop undefined fields so that moat (which refuses unknown/null ones) sees only what was given. */
function defined(obj) {
  const out = {}
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v
  return out
}

/**
 * One request to moat. body: an object (sent as JSON), a string or bytes
 * (sent raw). as: 'json' | 'bytes' | 'none'. Throws MoatError for an error
 * answer, an Error naming the URL when moat cannot be reached.
 */
async function request(conn, method, path, { body, as = 'json' } = {}) {
  const url = conn.baseUrl + path
  const headers = {}
  if (conn.token) headers.Authorization = `Bearer ${conn.token}`
  let payload
  if (body instanceof Uint8Array || body instanceof ArrayBuffer || typeof body === 'string') {
    payload = body
    headers['Content-Type'] = 'application/octet-stream'
  } else if (body !== undefined) {
    payload = JSON.stringify(body)
    headers['Content-Type'] = 'application/json'
  }
  let res
  try {
    res = await fetch(url, { method, headers, body: payload })
  } catch (e) {
    const why = e?.cause?.code || e?.cause?.message || e?.message || String(e)
    throw new Error(`moat: cannot reach ${url}: ${why}`, { cause: e })
  }
  const buf = new Uint8Array(await res.arrayBuffer())
  if (res.status >= 400) {
    let code = `http_${res.status}`
    let message = `moat answered ${res.status} to ${method} ${path}`
    try {
      const j = JSON.parse(new TextDecoder().decode(buf))
      if (j?.error?.code) code = j.error.code
      if (j?.error?.message) message = j.error.message
    } catch {}
    throw new MoatError(res.status, code, message)
  }
  if (as === 'bytes') return buf
  if (as === 'none' || buf.length === 0) return undefined
  try {
    return JSON.parse(new TextDecoder().decode(buf))
  } catch {
    throw new MoatError(res.status, 'bad_answer', `moat answered ${method} ${path} with a body that is not JSON`)
  }
}

/**
 * POST /v1/images as a text/event-stream: each "progress" event's data to
 * onProgress, then the "image" (returned) or "error" (thrown as MoatError).
 * An error answered before the stream starts is an ordinary error answer.
 */
async function pullStream(conn, body, onProgress) {
  const path = '/v1/images'
  const url = conn.baseUrl + path
  const headers = { 'Content-Type': 'application/json', Accept: 'text/event-stream' }
  if (conn.token) headers.Authorization = `Bearer ${conn.token}`
  let res
  try {
    res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) })
  } catch (e) {
    const why = e?.cause?.code || e?.cause?.message || e?.message || String(e)
    throw new Error(`moat: cannot reach ${url}: ${why}`, { cause: e })
  }
  const type = res.headers.get('content-type') ?? ''
  if (res.status >= 400 || !type.startsWith('text/event-stream')) {
    const buf = new Uint8Array(await res.arrayBuffer())
    let j
    try {
      j = JSON.parse(new TextDecoder().decode(buf))
    } catch {}
    if (res.status >= 400) {
      throw new MoatError(res.status, j?.error?.code ?? `http_${res.status}`,
        j?.error?.message ?? `moat answered ${res.status} to POST ${path}`)
    }
    if (j === undefined) throw new MoatError(res.status, 'bad_answer', `moat answered POST ${path} with a body that is not JSON`)
    return j // an image already in the store: no stream
  }
  const dec = new TextDecoder()
  let pending = ''
  let event = 'message'
  let data = []
  // one event: its data lines joined; true when it ends the stream
  const dispatch = () => {
    const text = data.join('\n')
    const ev = event
    event = 'message'
    data = []
    if (!text) return undefined
    let j
    try {
      j = JSON.parse(text)
    } catch {
      throw new MoatError(res.status, 'bad_answer', `moat's pull stream sent an event that is not JSON: ${text.slice(0, 100)}`)
    }
    if (ev === 'progress') {
      onProgress?.(j)
      return undefined
    }
    if (ev === 'image') return { image: j }
    if (ev === 'error') {
      const e = j?.error ?? {}
      throw new MoatError(e.status ?? 500, e.code ?? 'internal', e.message ?? 'the pull failed')
    }
    return undefined
  }
  for await (const chunk of res.body) {
    pending += dec.decode(chunk, { stream: true })
    let nl
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl).replace(/\r$/, '')
      pending = pending.slice(nl + 1)
      if (line === '') {
        const done = dispatch()
        if (done) return done.image
      } else if (line.startsWith(':')) {
        // a comment: the daemon's keep-alive
      } else if (line.startsWith('event:')) {
        event = line.slice(6).trim()
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''))
      }
    }
  }
  const done = dispatch()
  if (done) return done.image
  throw new MoatError(res.status, 'bad_answer', `moat's pull stream ended without an image or an error`)
}

/** moat's 404 for the sandbox itself (not for a path or process in it). */
export function isSandboxGone(e) {
  return e instanceof MoatError && e.status === 404 && /^no sandbox /.test(e.message)
}

const enc = (id) => encodeURIComponent(id)

export class MoatSandbox {
  /** Use MoatSandbox.create or MoatSandbox.connect. */
  constructor(conn, info) {
    Object.defineProperty(this, '_conn', { value: conn, enumerable: false })
    this.id = info.id
    this.baseUrl = conn.baseUrl
    this.info = info
  }

  static async create(opts = {}) {
    const conn = resolveConn(opts)
    const body = defined({
      image: opts.image,
      env: opts.env,
      limits: opts.limits,
      network: opts.network,
      manifest: opts.manifest,
      metadata: opts.metadata,
      timeout_s: opts.timeoutS,
      idle_timeout_s: opts.idleTimeoutS,
      users: opts.users,
    })
    const info = await request(conn, 'POST', '/v1/sandboxes', { body })
    return new MoatSandbox(conn, info)
  }

  static async connect(id, opts = {}) {
    if (typeof id !== 'string' || id === '') throw new TypeError('moat: connect needs a sandbox id')
    const conn = resolveConn(opts)
    const info = await request(conn, 'GET', `/v1/sandboxes/${enc(id)}`)
    return new MoatSandbox(conn, info)
  }

  static async list(opts = {}) {
    const conn = resolveConn(opts)
    const q = new URLSearchParams()
    for (const [k, v] of Object.entries(opts.metadata ?? {})) q.append(`metadata.${k}`, String(v))
    const s = q.toString()
    const r = await request(conn, 'GET', `/v1/sandboxes${s ? `?${s}` : ''}`)
    return r.sandboxes
  }

  // ---- the image store (GET/POST/DELETE /v1/images) ----

  /**
   * Pull ref from its registry into the daemon's store. onProgress({layers_done,
   * layers_total, bytes_done, bytes_total}) is called as the pull goes (the
   * answer is then streamed as server-sent events). -> the image.
   */
  static async pullImage(ref, opts = {}) {
    if (typeof ref !== 'string' || ref === '') throw new TypeError('moat: pullImage needs an image reference')
    const conn = resolveConn(opts)
    const body = defined({ ref, insecure: opts.insecure })
    if (opts.onProgress) return await pullStream(conn, body, opts.onProgress)
    return await request(conn, 'POST', '/v1/images', { body })
  }

  /** An OCI layout / OCI archive / docker save tar (bytes) into the store. -> the image. */
  static async importImage(tarBytes, opts = {}) {
    const conn = resolveConn(opts)
    return await request(conn, 'POST', `/v1/images/import${query({ name: opts.name })}`, { body: tarBytes })
  }

  /** -> [{id, names, size, created, layer_count}] */
  static async listImages(opts = {}) {
    return (await request(resolveConn(opts), 'GET', '/v1/images')).images
  }

  /** A name or the manifest digest -> the image with its config and layers. */
  static async inspectImage(name, opts = {}) {
    return await request(resolveConn(opts), 'GET', `/v1/images/${enc(name)}`)
  }

  /** 409 while a sandbox or a snapshot uses it. */
  static async removeImage(name, opts = {}) {
    await request(resolveConn(opts), 'DELETE', `/v1/images/${enc(name)}`, { as: 'none' })
  }

  // ---- snapshots (a create from one: create({image: 'snapshot:<sid>'}) or its name) ----

  /** -> [{id, name, sandbox_id, created_at, size, backend, image}] */
  static async listSnapshots(opts = {}) {
    return (await request(resolveConn(opts), 'GET', '/v1/snapshots')).snapshots
  }

  /** An id or a name. */
  static async getSnapshot(ref, opts = {}) {
    return await request(resolveConn(opts), 'GET', `/v1/snapshots/${enc(ref)}`)
  }

  static async deleteSnapshot(ref, opts = {}) {
    await request(resolveConn(opts), 'DELETE', `/v1/snapshots/${enc(ref)}`, { as: 'none' })
  }

  /** This sandbox's filesystem into a new snapshot; the sandbox keeps running. */
  async snapshot(opts = {}) {
    return await this._req('POST', '/snapshots', { body: defined({ name: opts.name }) })
  }

  /** Replace this sandbox's filesystem with the snapshot's (its processes are restarted). */
  async restore(snapshot) {
    const r = await this._req('POST', '/restore', { body: { snapshot } })
    if (r?.sandbox) this.info = r.sandbox
    return r
  }

  /** count new sandboxes whose filesystems start as this one's now (processes are not copied). */
  async fork(count = 1) {
    const r = await this._req('POST', '/fork', { body: { count } })
    return r.sandboxes.map((info) => new MoatSandbox(this._conn, info))
  }

  // ---- pause ----

  /** Freeze every process (409 when paused already); updates this.info. */
  async pause() {
    this.info = await this._req('POST', '/pause', { body: {} })
    return this.info
  }

  async resume() {
    this.info = await this._req('POST', '/resume', { body: {} })
    return this.info
  }

  _path(rest) {
    return `/v1/sandboxes/${enc(this.id)}${rest}`
  }

  _req(method, rest, o) {
    return request(this._conn, method, this._path(rest), o)
  }

  /** GET the sandbox again; updates and returns this.info. */
  async refresh() {
    this.info = await this._req('GET', '')
    return this.info
  }

  async exec(cmd, opts = {}) {
    const body = defined({
      cmd,
      cwd: opts.cwd,
      env: opts.env,
      stdin: opts.stdin,
      timeout_ms: opts.timeoutMs,
      yield_ms: opts.yieldMs,
      max_output_bytes: opts.maxOutputBytes,
      tty: opts.tty,
      cols: opts.cols,
      rows: opts.rows,
    })
    return await this._req('POST', '/exec', { body })
  }

  async writeStdin(processId, data = '', opts = {}) {
    const body = defined({ data, yield_ms: opts.yieldMs, close: opts.close })
    return await this._req('POST', `/processes/${enc(String(processId))}/stdin`, { body })
  }

  async kill(processId, signal = 'KILL') {
    await this._req('DELETE', `/processes/${enc(String(processId))}${query({ signal })}`, { as: 'none' })
  }

  /** -> [{process_id, cmd, running, tty}] */
  async processes() {
    return (await this._req('GET', '/processes')).processes
  }

  async readFile(path) {
    return await this._req('GET', `/files${query({ path })}`, { as: 'bytes' })
  }

  async readText(path) {
    return new TextDecoder().decode(await this.readFile(path))
  }

  async writeFile(path, data) {
    const body = typeof data === 'string' ? new TextEncoder().encode(data) : data
    if (!(body instanceof Uint8Array) && !(body instanceof ArrayBuffer)) {
      throw new TypeError(`moat: writeFile ${path}: data must be a string or a Uint8Array`)
    }
    await this._req('PUT', `/files${query({ path })}`, { body, as: 'none' })
  }

  async remove(path, opts = {}) {
    await this._req('DELETE', `/files${query({ path, recursive: opts.recursive ? 'true' : undefined })}`, { as: 'none' })
  }

  async mkdir(path) {
    await this._req('POST', `/files/mkdir${query({ path })}`, { as: 'none' })
  }

  async list(path = '.', opts = {}) {
    return await this._req('GET', `/files/list${query({ path, depth: opts.depth })}`)
  }

  async stat(path) {
    try {
      return await this._req('GET', `/files/stat${query({ path })}`)
    } catch (e) {
      // a missing path is null; a missing sandbox stays an error
      if (e instanceof MoatError && e.status === 404 && !isSandboxGone(e)) return null
      throw e
    }
  }

  async exists(path) {
    return (await this.stat(path)) !== null
  }

  async patch(patchText) {
    return await this._req('POST', '/patch', { body: { patch: patchText } })
  }

  async image(path) {
    return await this._req('GET', `/image${query({ path })}`)
  }

  async archive() {
    return await this._req('GET', '/archive', { as: 'bytes' })
  }

  async restoreArchive(tarBytes) {
    await this._req('PUT', '/archive', { body: tarBytes, as: 'none' })
  }

  async netlog() {
    const b = await this._req('GET', '/netlog', { as: 'bytes' })
    return new TextDecoder().decode(b).split('\n').filter(Boolean).map((l) => JSON.parse(l))
  }

  /** Idempotent: a sandbox already gone (404) counts as deleted. */
  async delete() {
    try {
      await this._req('DELETE', '', { as: 'none' })
    } catch (e) {
      if (e instanceof MoatError && e.status === 404) return
      throw e
    }
  }
}
