// MoatBackend: a moat sandbox as a Deep Agents (npm `deepagents`) sandbox
// backend, so that a createDeepAgent agent's tools (execute, ls, read_file,
// write_file, edit_file, delete, glob, grep) run inside the sandbox.
//
// It extends the library's BaseSandbox (what the library expects of a
// sandbox backend: `id`, `execute`, `uploadFiles`, `downloadFiles`, and
// isSandboxBackend() true), but does not derive the file operations from
// shell one-liners as BaseSandbox does: ls, read, readRaw, write, edit,
// delete and glob go through moat's file API (GET/PUT/DELETE files,
// files/list, files/stat), so paths are checked and confined by the daemon
// and errors carry moat's message. Only grep runs a command (moat has no
// search endpoint), with its arguments passed in the environment, never
// spliced into the command line. A thin client: no isolation logic here.
import { BaseSandbox } from 'deepagents'
import { MoatError, MoatSandbox, isSandboxGone } from './client.js'

const DEFAULT_TIMEOUT_MS = 30 * 60 * 1000
const DEFAULT_MAX_OUTPUT = 1024 * 1024
const DEFAULT_GREP_MAX_OUTPUT = 8 * 1024 * 1024
const UPLOAD_CONCURRENCY = 8
const MAX_LIST_DEPTH = 64
const EMPTY_FILE = 'System reminder: File exists but has empty contents'

// The library's read_file/write_file tools decide text or binary from the
// file name (binary is base64 in write_file's content and an image/file
// block in read_file's answer); the same rule here keeps both sides agreed.
const BINARY_TYPES = {
  '.png': 'image/png', '.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.gif': 'image/gif',
  '.webp': 'image/webp', '.heic': 'image/heic', '.heif': 'image/heif',
  '.mp3': 'audio/mpeg', '.wav': 'audio/wav', '.aiff': 'audio/aiff', '.aac': 'audio/aac',
  '.ogg': 'audio/ogg', '.flac': 'audio/flac',
  '.mp4': 'video/mp4', '.webm': 'video/webm', '.mpeg': 'video/mpeg', '.mpg': 'video/mpeg',
  '.mov': 'video/quicktime', '.avi': 'video/x-msvideo', '.flv': 'video/x-flv',
  '.wmv': 'video/x-ms-wmv', '.3gpp': 'video/3gpp',
  '.pdf': 'application/pdf', '.ppt': 'application/vnd.ms-powerpoint',
  '.pptx': 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
}

/** The MIME type the library would give this path; text unless a known binary type. */
export function mimeTypeOf(path) {
  const name = String(path).slice(String(path).lastIndexOf('/') + 1)
  const dot = name.lastIndexOf('.')
  const ext = dot <= 0 ? '' : name.slice(dot).toLowerCase()
  if (BINARY_TYPES[ext]) return BINARY_TYPES[ext]
  if (ext === '.svg') return 'image/svg+xml'
  if (ext === '.json') return 'application/json'
  return 'text/plain'
}

function isText(mime) {
  return mime.startsWith('text/') || mime === 'application/json' || mime === 'application/javascript' ||
    mime === 'image/svg+xml'
}

/**
 * The Deep Agents error code for a moat error about one file, or null when
 * the error is not about the file (the sandbox is gone, auth, the daemon):
 * those are thrown, since no per-file code describes them.
 */
export function fileErrorCode(e) {
  if (!(e instanceof MoatError)) return null
  switch (e.code) {
    case 'not_found':
      // moat's 404 for the sandbox itself is not about the file
      return isSandboxGone(e) ? null : 'file_not_found'
    case 'is_directory':
      return 'is_directory'
    case 'invalid_path':
      return 'invalid_path'
    case 'forbidden':
      return 'permission_denied'
    default:
      return null
  }
}

/** A message for a tool answer: moat's own (it names the path) or the error's. */
function why(e) {
  return e instanceof MoatError ? e.message : e?.message || String(e)
}

/** The result of f(), or {error} for an error about the file; others are thrown. */
async function fileOp(f, describe) {
  try {
    return await f()
  } catch (e) {
    if (fileErrorCode(e) === null && !(e instanceof MoatError && (e.code === 'invalid_request' || e.code === 'too_large'))) throw e
    return { error: describe(e) }
  }
}

const iso = (mtime) => new Date((Number(mtime) || 0) * 1000).toISOString()

function info(entry) {
  const dir = entry.type === 'dir'
  return {
    path: dir && !entry.path.endsWith('/') ? entry.path + '/' : entry.path,
    is_dir: dir,
    size: entry.size,
    modified_at: iso(entry.mtime),
  }
}

/**
 * A glob as a matcher over '/'-separated paths (an object with RegExp's
 * `test`): `*` and `?` stay within a component, `**` spans components
 * (`**\/` also matches none), `[...]` is a class, `{a,b}` alternatives;
 * everything else is literal. Not a RegExp: the pattern is the model's, and
 * a backtracking RegExp of `*a*a*a*a*a*a*a*a*b` takes minutes on one long
 * name, blocking the host's event loop. The pattern is compiled to a small
 * program run as a Pike VM: time linear in the path times the pattern.
 */
export function globRegExp(pattern) {
  const prog = [] // {op:'char', ok(c)} | {op:'split', a, b} | {op:'jmp', to} | {op:'match'}
  const emit = (ins) => prog.push(ins) - 1
  const star = (ok) => {
    const loop = emit({ op: 'split' })
    emit({ op: 'char', ok })
    emit({ op: 'jmp', to: loop })
    prog[loop].a = loop + 1
    prog[loop].b = prog.length
  }
  const notSlash = (c) => c !== '/'
  const any = () => true
  let i = 0
  let depth = 0
  // a sequence up to the end, or (inside braces) up to its ',' or '}'
  const seq = () => {
    while (i < pattern.length) {
      const c = pattern[i]
      if (depth > 0 && (c === ',' || c === '}')) return
      i++
      if (c === '*') {
        if (pattern[i] === '*') {
          i++
          if (pattern[i] === '/') {
            i++
            const opt = emit({ op: 'split' })
            prog[opt].a = prog.length
            star(any)
            emit({ op: 'char', ok: (x) => x === '/' })
            prog[opt].b = prog.length
          } else {
            star(any)
          }
        } else {
          star(notSlash)
        }
      } else if (c === '?') {
        emit({ op: 'char', ok: notSlash })
      } else if (c === '[' && pattern.indexOf(']', i + 1) !== -1) {
        const end = pattern.indexOf(']', i + 1)
        let body = pattern.slice(i, end)
        if (body[0] === '!') body = '^' + body.slice(1)
        // one character against one class: nothing to backtrack
        const cls = new RegExp('^[' + body.replace(/\\/g, '\\\\') + ']$')
        emit({ op: 'char', ok: (x) => cls.test(x) })
        i = end + 1
      } else if (c === '{') {
        depth++
        const jumps = []
        for (;;) {
          const split = emit({ op: 'split' })
          prog[split].a = prog.length
          seq()
          jumps.push(emit({ op: 'jmp' }))
          prog[split].b = prog.length
          if (i >= pattern.length) throw new Error(`glob pattern ${JSON.stringify(pattern)}: unclosed "{"`)
          if (pattern[i++] === '}') break
        }
        // the last alternative's split has no other way: it fails
        emit({ op: 'char', ok: () => false })
        for (const j of jumps) prog[j].to = prog.length
        depth--
      } else {
        emit({ op: 'char', ok: (x) => x === c })
      }
    }
  }
  seq()
  emit({ op: 'match' })
  const add = (set, seen, pc) => {
    if (seen[pc]) return
    seen[pc] = true
    const ins = prog[pc]
    if (ins.op === 'jmp') add(set, seen, ins.to)
    else if (ins.op === 'split') {
      add(set, seen, ins.a)
      add(set, seen, ins.b)
    } else set.push(pc)
  }
  return {
    source: pattern,
    test(path) {
      const str = String(path)
      let cur = []
      add(cur, [], 0)
      for (let k = 0; k < str.length; k++) {
        const ch = str[k] // UTF-16 units, as a RegExp without the u flag
        const next = []
        const seen = []
        for (const pc of cur) if (prog[pc].op === 'char' && prog[pc].ok(ch)) add(next, seen, pc + 1)
        if (next.length === 0) return false
        cur = next
      }
      return cur.some((pc) => prog[pc].op === 'match')
    },
  }
}

const hasMagic = (s) => /[*?[{]/.test(s)

function joinPath(base, rel) {
  if (!rel) return base
  return base.endsWith('/') ? base + rel : `${base}/${rel}`
}

// Runs inside the sandbox: every argument arrives in the environment, so no
// pattern or path is ever parsed by the shell. -I skips binary files, -Z
// ends each file name with a NUL (names with ':' parse; moat's output shows
// it as U+FFFD), -F is literal.
// /proc, /sys, /dev and /run are pruned (a search of "/" must not walk them).
const GREP_SCRIPT = [
  'if [ -n "$MOAT_GREP_GLOB" ]; then set -- -name "$MOAT_GREP_GLOB"; else set --; fi',
  'find "$MOAT_GREP_DIR" \\( -path /proc -o -path /sys -o -path /dev -o -path /run \\) -prune -o -type f "$@" -print0 2>/dev/null' +
    ' | xargs -0 -r grep -IHnZF -e "$MOAT_GREP_PATTERN" -- 2>/dev/null',
  'exit 0',
].join('\n')

export class MoatBackend extends BaseSandbox {
  #sandbox
  #owned
  #closed = false

  /**
   * sandbox: a MoatSandbox (moat-sandbox/client). options.timeoutMs: each
   * execute's limit (default 30 min; 0 = none), options.maxOutputBytes:
   * execute's output cap (default 1 MiB), options.owned: close() deletes
   * the sandbox (set by MoatBackend.create). options.searchRoot: where
   * grep and glob look when given no path or "/" (default: the sandbox's
   * workspace; "/" searches everything, which on the host image means the
   * host's whole /usr: a grep there takes a minute).
   */
  constructor(sandbox, { timeoutMs = DEFAULT_TIMEOUT_MS, maxOutputBytes = DEFAULT_MAX_OUTPUT, owned = false, searchRoot } = {}) {
    super()
    if (!sandbox || typeof sandbox.exec !== 'function' || typeof sandbox.id !== 'string' || !sandbox.id) {
      throw new TypeError('MoatBackend: the first argument must be a MoatSandbox (from moat-sandbox/client)')
    }
    if (!Number.isInteger(timeoutMs) || timeoutMs < 0) throw new TypeError(`MoatBackend: timeoutMs must be an integer >= 0, got ${timeoutMs}`)
    if (!Number.isInteger(maxOutputBytes) || maxOutputBytes <= 0) {
      throw new TypeError(`MoatBackend: maxOutputBytes must be a positive integer, got ${maxOutputBytes}`)
    }
    this.#sandbox = sandbox
    this.#owned = owned
    this.timeoutMs = timeoutMs
    this.maxOutputBytes = maxOutputBytes
    const root = searchRoot ?? sandbox.info?.workspace ?? '/workspace'
    if (typeof root !== 'string' || !root.startsWith('/')) {
      throw new TypeError(`MoatBackend: searchRoot must be an absolute path, got ${JSON.stringify(root)}`)
    }
    this.searchRoot = root
  }

  /** The directory grep/glob search for a path of "/" or none. */
  #searchPath(path) {
    return !path || path === '/' ? this.searchRoot : path
  }

  /**
   * A new sandbox (MoatSandbox.create's options: baseUrl, token, image,
   * limits, network, manifest, env, metadata, timeoutS, idleTimeoutS, users)
   * and a backend that owns it: close() deletes it.
   */
  static async create({ timeoutMs, maxOutputBytes, searchRoot, ...sandboxOptions } = {}) {
    const sb = await MoatSandbox.create(sandboxOptions)
    try {
      return new MoatBackend(sb, { timeoutMs, maxOutputBytes, searchRoot, owned: true })
    } catch (e) {
      await sb.delete().catch(() => {})
      throw e
    }
  }

  /** A backend on an existing sandbox (not owned: close() leaves it). */
  static async connect(id, { baseUrl, token, timeoutMs, maxOutputBytes, searchRoot } = {}) {
    const sb = await MoatSandbox.connect(id, { baseUrl, token })
    return new MoatBackend(sb, { timeoutMs, maxOutputBytes, searchRoot })
  }

  /** The sandbox's id (moat's), as the protocol's backend id. */
  get id() {
    return this.#sandbox.id
  }

  /** The MoatSandbox underneath (moat's whole API: patch, image, archive, processes...). */
  get sandbox() {
    return this.#sandbox
  }

  get owned() {
    return this.#owned
  }

  /**
   * Runs command with /bin/sh -c in the sandbox's workspace. stderr is
   * merged into stdout in the order written (`exec 2>&1` before the command,
   * on the same line so the shell's line numbers are the command's own).
   */
  async execute(command) {
    if (typeof command !== 'string') throw new TypeError(`MoatBackend.execute: command must be a string, got ${typeof command}`)
    const r = await this.#sandbox.exec(`exec 2>&1; ${command}`, {
      timeoutMs: this.timeoutMs || undefined,
      maxOutputBytes: this.maxOutputBytes,
    })
    let output = (r.stdout || '') + (r.stderr || '')
    if (r.timed_out) {
      output += `${output && !output.endsWith('\n') ? '\n' : ''}[moat: the command was killed after ${this.timeoutMs} ms]`
    }
    return { output, exitCode: typeof r.exit_code === 'number' ? r.exit_code : null, truncated: Boolean(r.truncated) }
  }

  /**
   * Writes each [path, bytes] (parents created); one answer per file, in
   * order, with the protocol's error code for a file that could not be
   * written. Arguments are checked before anything is written.
   */
  async uploadFiles(files) {
    if (!Array.isArray(files)) throw new TypeError('MoatBackend.uploadFiles: expected an array of [path, Uint8Array]')
    files.forEach((f, i) => {
      if (!Array.isArray(f) || f.length !== 2) throw new TypeError(`MoatBackend.uploadFiles: files[${i}] is not a [path, content] pair`)
      if (!(f[1] instanceof Uint8Array)) throw new TypeError(`MoatBackend.uploadFiles: files[${i}] (${f[0]}): content must be a Uint8Array`)
    })
    return await this.#each(files, async ([path, content]) => {
      if (typeof path !== 'string' || path === '' || path.includes('\0')) return { path, error: 'invalid_path' }
      try {
        await this.#sandbox.writeFile(path, content)
        return { path, error: null }
      } catch (e) {
        const code = fileErrorCode(e)
        if (code === null) throw e
        return { path, error: code }
      }
    })
  }

  /** Reads each path; one answer per path, in order: content, or the error code. */
  async downloadFiles(paths) {
    if (!Array.isArray(paths)) throw new TypeError('MoatBackend.downloadFiles: expected an array of paths')
    return await this.#each(paths, async (path) => {
      if (typeof path !== 'string' || path === '' || path.includes('\0')) return { path, content: null, error: 'invalid_path' }
      try {
        return { path, content: await this.#sandbox.readFile(path), error: null }
      } catch (e) {
        const code = fileErrorCode(e)
        if (code === null) throw e
        return { path, content: null, error: code }
      }
    })
  }

  async #each(items, f) {
    const out = new Array(items.length)
    for (let i = 0; i < items.length; i += UPLOAD_CONCURRENCY) {
      const part = await Promise.all(items.slice(i, i + UPLOAD_CONCURRENCY).map(f))
      part.forEach((r, j) => { out[i + j] = r })
    }
    return out
  }

  /** The directory's entries (not recursive); directories end with '/'. */
  async ls(path) {
    return await fileOp(async () => {
      const { entries } = await this.#sandbox.list(path || '/', { depth: 1 })
      return { files: entries.map(info).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)) }
    }, (e) => `cannot list '${path}': ${why(e)}`)
  }

  /**
   * A text file's lines [offset, offset + limit) (0-based), with the line
   * window for the read_file tool; a binary type's whole bytes.
   */
  async read(filePath, offset = 0, limit = 500) {
    const mimeType = mimeTypeOf(filePath)
    const got = await fileOp(async () => ({ bytes: await this.#sandbox.readFile(filePath) }), (e) => `cannot read '${filePath}': ${why(e)}`)
    if (got.error) return got
    if (!isText(mimeType)) return { content: got.bytes, mimeType }
    let text
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(got.bytes)
    } catch {
      return { error: `'${filePath}' is not UTF-8 text (${got.bytes.length} bytes): read it with execute (e.g. xxd, file) instead` }
    }
    if (text === '') return { content: EMPTY_FILE, mimeType }
    const off = Number.isFinite(offset) ? Math.max(0, Math.floor(offset)) : 0
    const lim = Number.isFinite(limit) ? Math.max(0, Math.floor(limit)) : 0
    const lines = text.split('\n')
    const total = lines[lines.length - 1] === '' ? lines.length - 1 : lines.length
    const selected = lines.slice(off, Math.min(off + lim, total))
    if (selected.length === 0) return { content: '', mimeType }
    const end = off + selected.length
    return {
      content: selected.join('\n'),
      mimeType,
      totalLines: total,
      startLine: off + 1,
      endLine: end,
      nextOffset: end < total ? end : undefined,
    }
  }

  /** The whole file as FileData (text decoded for a text type). */
  async readRaw(filePath) {
    const got = await fileOp(async () => ({ bytes: await this.#sandbox.readFile(filePath) }), (e) => `cannot read '${filePath}': ${why(e)}`)
    if (got.error) return got
    const mimeType = mimeTypeOf(filePath)
    const st = await this.#sandbox.stat(filePath).catch(() => null)
    const when = st ? iso(st.mtime) : new Date().toISOString()
    const content = isText(mimeType) ? new TextDecoder().decode(got.bytes) : got.bytes
    return { data: { content, mimeType, created_at: when, modified_at: when } }
  }

  /** Creates or replaces the file (parents created); a binary type's content is base64. */
  async write(filePath, content) {
    if (typeof content !== 'string') return { error: `cannot write '${filePath}': content must be a string` }
    const mimeType = mimeTypeOf(filePath)
    const bytes = isText(mimeType) ? new TextEncoder().encode(content) : Buffer.from(content, 'base64')
    return await fileOp(async () => {
      await this.#sandbox.writeFile(filePath, bytes)
      return { path: filePath, filesUpdate: null }
    }, (e) => `cannot write '${filePath}': ${why(e)}`)
  }

  /**
   * Replaces oldString by newString (exactly once, or every time with
   * replaceAll) and writes the file back; nothing is written on an error.
   */
  async edit(filePath, oldString, newString, replaceAll = false) {
    if (typeof oldString !== 'string' || typeof newString !== 'string') {
      return { error: `cannot edit '${filePath}': old_string and new_string must be strings` }
    }
    const got = await fileOp(async () => ({ bytes: await this.#sandbox.readFile(filePath) }), (e) => `cannot edit '${filePath}': ${why(e)}`)
    if (got.error) return got
    let text
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(got.bytes)
    } catch {
      return { error: `cannot edit '${filePath}': it is not UTF-8 text` }
    }
    let next
    let count
    if (oldString === '') {
      if (text !== '') return { error: `cannot edit '${filePath}': old_string is empty but the file is not` }
      next = newString
      count = newString === '' ? 0 : 1
    } else {
      const parts = text.split(oldString)
      count = parts.length - 1
      if (count === 0) return { error: `String not found in file '${filePath}'` }
      if (count > 1 && !replaceAll) {
        return { error: `Multiple occurrences (${count}) of old_string in '${filePath}': give more context or use replace_all` }
      }
      next = parts.join(newString)
    }
    if (next !== text) {
      const w = await fileOp(async () => {
        await this.#sandbox.writeFile(filePath, new TextEncoder().encode(next))
        return {}
      }, (e) => `cannot write the edited '${filePath}': ${why(e)}`)
      if (w.error) return w
    }
    return { path: filePath, filesUpdate: null, occurrences: count }
  }

  /** Removes a file, or a directory with everything in it. */
  async delete(filePath) {
    return await fileOp(async () => {
      await this.#sandbox.remove(filePath, { recursive: true })
      return { path: filePath, filesUpdate: null }
    }, (e) => `cannot delete '${filePath}': ${why(e)}`)
  }

  /**
   * Files and directories matching pattern, with absolute paths. A relative
   * pattern is matched against paths relative to path (for none or "/":
   * searchRoot), an absolute one against absolute paths. Only the pattern's literal leading
   * directories are listed, to the depth the pattern needs.
   */
  async glob(pattern, path) {
    if (typeof pattern !== 'string' || pattern === '') return { error: 'glob: the pattern must be a non-empty string' }
    let base = this.#searchPath(path)
    // "./x" is "x": paths are matched relative to base, without a "./"
    let rel = pattern.replace(/^(?:\.\/+)+/, '')
    if (pattern.startsWith('/')) {
      base = '/'
      rel = pattern.replace(/^\/+/, '')
    }
    let regex
    try {
      regex = globRegExp(rel)
    } catch (e) {
      return { error: e.message }
    }
    const parts = rel.split('/').filter((s) => s !== '')
    const lead = []
    while (lead.length < parts.length && !hasMagic(parts[lead.length])) lead.push(parts[lead.length])
    const rest = parts.slice(lead.length)
    const root = joinPath(base, lead.join('/'))
    const strip = base.endsWith('/') ? base : base + '/'
    const relOf = (p) => (p.startsWith(strip) ? p.slice(strip.length) : p)
    return await fileOp(async () => {
      if (rest.length === 0) {
        // no wildcard: the path itself, if it exists
        const st = await this.#sandbox.stat(root)
        return { files: st ? [info(st)] : [], truncated: false }
      }
      const depth = rest.some((s) => s.includes('**')) ? MAX_LIST_DEPTH : rest.length
      let listing
      try {
        listing = await this.#sandbox.list(root, { depth })
      } catch (e) {
        // a literal directory that is missing (or a file) matches nothing
        if (e instanceof MoatError && (fileErrorCode(e) === 'file_not_found' || e.code === 'invalid_request') && lead.length > 0) {
          return { files: [], truncated: false }
        }
        throw e
      }
      const files = listing.entries.filter((e) => regex.test(relOf(e.path))).map(info)
      files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
      return { files, truncated: Boolean(listing.truncated) }
    }, (e) => `glob '${pattern}' in '${base}': ${why(e)}`)
  }

  /**
   * Lines containing pattern literally, in the text files under path (a
   * directory or a file; for none or "/": searchRoot; glob filters file
   * names, as `find -name`). Runs find and grep inside the sandbox.
   */
  async grep(pattern, path, glob = null, maxCount = null) {
    if (typeof pattern !== 'string' || pattern === '') return { error: 'grep: the pattern must be a non-empty string' }
    const dir = this.#searchPath(path)
    const st = await fileOp(async () => ({ st: await this.#sandbox.stat(dir) }), (e) => `grep in '${dir}': ${why(e)}`)
    if (st.error) return st
    if (!st.st) return { error: `grep: path '${dir}' not found` }
    const r = await this.#sandbox.exec(GREP_SCRIPT, {
      env: {
        MOAT_GREP_PATTERN: pattern,
        MOAT_GREP_DIR: dir.startsWith('/') ? dir : `./${dir}`,
        MOAT_GREP_GLOB: glob || '',
      },
      timeoutMs: this.timeoutMs || undefined,
      maxOutputBytes: DEFAULT_GREP_MAX_OUTPUT,
    })
    const lines = (r.stdout || '').split('\n')
    // the last piece is empty, or cut short by the output cap
    lines.pop()
    const matches = []
    for (const line of lines) {
      // grep -Z ends the name with a NUL, which moat's UTF-8 output shows as U+FFFD
      const nul = line.search(/[\0\uFFFD]/)
      if (nul < 0) continue
      const file = line.slice(0, nul)
      const rest = line.slice(nul + 1)
      const colon = rest.indexOf(':')
      const n = Number.parseInt(rest.slice(0, colon), 10)
      if (colon < 0 || !Number.isFinite(n)) continue
      if (!isText(mimeTypeOf(file))) continue
      matches.push({ path: file.startsWith('./') ? file.slice(2) : file, line: n, text: rest.slice(colon + 1) })
    }
    let truncated = Boolean(r.truncated || r.timed_out)
    if (Number.isInteger(maxCount) && maxCount > 0 && matches.length > maxCount) {
      matches.length = maxCount
      truncated = true
    }
    return truncated ? { matches, truncated } : { matches }
  }

  /** Deletes the sandbox if this backend owns it (MoatBackend.create); idempotent. */
  async close() {
    if (this.#closed) return
    this.#closed = true
    if (this.#owned) await this.#sandbox.delete()
  }

  /**
   * Deletes the sandbox, owned or not (404 counts as gone). Not `delete`:
   * that name is the protocol's file deletion (the agent's delete tool).
   */
  async deleteSandbox() {
    this.#closed = true
    await this.#sandbox.delete()
  }

  async [Symbol.asyncDispose]() {
    await this.close()
  }
}
