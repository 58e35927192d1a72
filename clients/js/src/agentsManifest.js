// An Agents SDK Manifest turned into what moat is asked for. Nothing here
// talks to moat: it validates the manifest, reads the host's local_file and
// local_dir sources (they are files on the SDK's host, so the client uploads
// their contents; the daemon is never given a host path), and returns a
// plan. Every refusal happens here, before any sandbox exists or any file is
// written, and names the entry.
import fs from 'node:fs/promises'
import nodePath from 'node:path'
import { isMount, normalizeRelativePath, permissionsForSandboxEntry, SandboxUnsupportedFeatureError,
  SandboxLocalFileReadError, SandboxLocalDirReadError, SandboxConfigurationError } from '@openai/agents/sandbox'

export const WORKSPACE = '/workspace'
// text files go inline in the create request (one round trip) up to this
// total; the rest, and every binary file, is uploaded with PUT files after
// the create (moat's JSON bodies are limited to 16 MiB)
const INLINE_BUDGET = 8 << 20

const where = (rel) => `manifest.entries[${JSON.stringify(rel)}]`
const utf8 = new TextDecoder('utf-8', { fatal: true })

function unsupported(message, details) {
  return new SandboxUnsupportedFeatureError(`moat: ${message}`, { provider: 'moat', ...details })
}

function modeOf(entry, fallback) {
  if (entry.permissions === undefined || entry.permissions === null) return fallback
  return permissionsForSandboxEntry(entry.permissions).toMode() & 0o7777
}

/** Refuse what moat cannot honour for the whole manifest (root, users, groups, grants). */
export function checkManifestFeatures(manifest) {
  if (manifest.root !== WORKSPACE) {
    throw unsupported(`manifest.root must be ${WORKSPACE} (moat's workspace), not ${JSON.stringify(manifest.root)}`, { feature: 'root' })
  }
  if (manifest.users?.length) {
    throw unsupported(`manifest.users (${manifest.users.map((u) => u.name).join(', ')}) are not supported: a moat sandbox has one user`, { feature: 'users' })
  }
  if (manifest.groups?.length) {
    throw unsupported(`manifest.groups (${manifest.groups.map((g) => g.name).join(', ')}) are not supported: a moat sandbox has one user`, { feature: 'groups' })
  }
  if (manifest.extraPathGrants?.length) {
    throw unsupported(`manifest.extraPathGrants (${manifest.extraPathGrants.map((g) => g.path).join(', ')}) are not supported: a moat sandbox sees only its own filesystem`, { feature: 'extraPathGrants' })
  }
}

/**
 * The plan for entries (a path-keyed object, as manifest.entries):
 * ops in parent-first order, each
 *   {op:'dir', path, mode?} | {op:'file', path, bytes, text?, mode?} |
 *   {op:'git', path, repo, ref?}
 * with workspace-relative paths. localBase: where relative local sources
 * are resolved, and what they must stay under.
 */
export async function planEntries(entries, { localBase }) {
  const ops = []
  const base = nodePath.resolve(localBase)
  const visit = async (rel, entry) => {
    if (!entry || typeof entry !== 'object') throw new SandboxConfigurationError(`moat: ${where(rel)} is not an entry object`)
    if (entry.group !== undefined && entry.group !== null) {
      throw unsupported(`${where(rel)}: entry groups are not supported (a moat sandbox has one user)`, { feature: 'group', path: rel })
    }
    if (isMount(entry)) {
      throw unsupported(`${where(rel)}: ${entry.type} entries are not supported (moat does not mount remote storage)`, { feature: entry.type, path: rel })
    }
    switch (entry.type) {
      case 'file': {
        const c = entry.content ?? ''
        const bytes = typeof c === 'string' ? new TextEncoder().encode(c) : c instanceof Uint8Array ? c : null
        if (!bytes) throw new SandboxConfigurationError(`moat: ${where(rel)}: content must be a string or a Uint8Array`)
        ops.push({ op: 'file', path: rel, bytes, mode: modeOf(entry) })
        return
      }
      case 'dir': {
        ops.push({ op: 'dir', path: rel, mode: modeOf(entry) })
        for (const [k, child] of Object.entries(entry.children ?? {})) await visit(join(rel, k, where(rel)), child)
        return
      }
      case 'local_file': {
        const src = localSource(base, entry.src, rel)
        await confined(base, src, SandboxLocalFileReadError, rel)
        const st = await lstatOr(src, SandboxLocalFileReadError, rel)
        if (st.isSymbolicLink()) throw new SandboxLocalFileReadError(`moat: ${where(rel)}: local_file source ${src} is a symbolic link`, { path: rel, src })
        if (!st.isFile()) throw new SandboxLocalFileReadError(`moat: ${where(rel)}: local_file source ${src} is not a regular file`, { path: rel, src })
        ops.push({ op: 'file', path: rel, bytes: await readOr(src, SandboxLocalFileReadError, rel), mode: modeOf(entry, st.mode & 0o777) })
        return
      }
      case 'local_dir': {
        const src = localSource(base, entry.src, rel)
        await confined(base, src, SandboxLocalDirReadError, rel)
        const st = await lstatOr(src, SandboxLocalDirReadError, rel)
        if (!st.isDirectory()) throw new SandboxLocalDirReadError(`moat: ${where(rel)}: local_dir source ${src} is not a directory`, { path: rel, src })
        await copyDir(src, rel, modeOf(entry, st.mode & 0o777), ops)
        return
      }
      case 'git_repo': {
        if (entry.subpath !== undefined && entry.subpath !== null && entry.subpath !== '') {
          throw unsupported(`${where(rel)}: git_repo subpath is not supported (moat clones the whole repository)`, { feature: 'git_repo.subpath', path: rel })
        }
        if (typeof entry.repo !== 'string' || entry.repo === '') throw new SandboxConfigurationError(`moat: ${where(rel)}: git_repo needs repo ("owner/name")`)
        const host = entry.host ?? 'github.com'
        const repo = /^https?:\/\//.test(entry.repo) ? entry.repo : `https://${host}/${entry.repo.replace(/\.git$/, '')}.git`
        ops.push({ op: 'git', path: rel, repo, ref: entry.ref })
        return
      }
      default:
        throw unsupported(`${where(rel)}: entry type ${JSON.stringify(entry.type)} is not supported`, { feature: String(entry.type), path: rel })
    }
  }
  for (const [k, entry] of Object.entries(entries ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
    await visit(join('', k, 'manifest.entries'), entry)
  }
  return ops
}

function join(parent, key, what) {
  let rel
  try {
    rel = normalizeRelativePath(key)
  } catch (e) {
    throw new SandboxConfigurationError(`moat: ${what}: ${e.message}`)
  }
  if (rel === '') throw new SandboxConfigurationError(`moat: ${what}: an entry needs a non-empty path`)
  if (/[\n\r\0]/.test(rel)) throw new SandboxConfigurationError(`moat: ${what}: entry path ${JSON.stringify(key)} has a newline or NUL`)
  return parent ? `${parent}/${rel}` : rel
}

function localSource(base, src, rel) {
  if (typeof src !== 'string' || src === '') throw new SandboxConfigurationError(`moat: ${where(rel)}: src must be a host path`)
  const abs = nodePath.resolve(base, src)
  const r = nodePath.relative(base, abs)
  if (r.startsWith('..') || nodePath.isAbsolute(r)) {
    throw new SandboxConfigurationError(`moat: ${where(rel)}: local source ${abs} is outside the local source base directory ${base} (set localSourceBaseDir)`, { path: rel, src: abs })
  }
  return abs
}

// The lexical check above does not see a symbolic link on the way
// (base/link/secret with link -> ~/.ssh): the directory holding the source,
// with its links resolved, must be under the base's real path too. (The
// source's own last component is lstat'ed by the caller: a link is refused.)
async function confined(base, abs, E, rel) {
  if (abs === base) return
  let realBase, realDir
  try {
    realBase = await fs.realpath(base)
    realDir = await fs.realpath(nodePath.dirname(abs))
  } catch (e) {
    throw new E(`moat: ${where(rel)}: cannot read ${abs}: ${e.code || e.message}`, { path: rel, src: abs })
  }
  const r = nodePath.relative(realBase, nodePath.join(realDir, nodePath.basename(abs)))
  if (r.startsWith('..') || nodePath.isAbsolute(r)) {
    throw new SandboxConfigurationError(`moat: ${where(rel)}: local source ${abs} is outside the local source base directory ${base} (a symbolic link on its way leads to ${realDir})`, { path: rel, src: abs })
  }
}

async function lstatOr(p, E, rel) {
  try {
    return await fs.lstat(p)
  } catch (e) {
    throw new E(`moat: ${where(rel)}: cannot read ${p}: ${e.code || e.message}`, { path: rel, src: p })
  }
}

async function readOr(p, E, rel) {
  try {
    return new Uint8Array(await fs.readFile(p))
  } catch (e) {
    throw new E(`moat: ${where(rel)}: cannot read ${p}: ${e.code || e.message}`, { path: rel, src: p })
  }
}

async function copyDir(src, rel, mode, ops) {
  ops.push({ op: 'dir', path: rel, mode })
  let names
  try {
    names = (await fs.readdir(src, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))
  } catch (e) {
    throw new SandboxLocalDirReadError(`moat: local_dir ${src}: ${e.code || e.message}`, { path: rel, src })
  }
  for (const d of names) {
    const p = nodePath.join(src, d.name)
    const r = `${rel}/${d.name}`
    if (/[\n\r]/.test(d.name)) throw new SandboxLocalDirReadError(`moat: local_dir ${src}: ${JSON.stringify(d.name)} has a newline in its name`, { path: r, src: p })
    if (d.isSymbolicLink()) throw new SandboxLocalDirReadError(`moat: local_dir entries do not support symbolic links: ${p}`, { path: r, src: p })
    const st = await lstatOr(p, SandboxLocalDirReadError, r)
    if (st.isDirectory()) await copyDir(p, r, st.mode & 0o777, ops)
    else if (st.isFile()) ops.push({ op: 'file', path: r, bytes: await readOr(p, SandboxLocalDirReadError, r), mode: st.mode & 0o777 })
    else throw new SandboxLocalDirReadError(`moat: local_dir ${src}: ${d.name} is not a regular file or directory`, { path: r, src: p })
  }
}

/**
 * Split a plan for a create: moat's manifest {entries} (text files with
 * their mode, directories, git repositories), the files to upload after
 * it, and the modes to set after that (directories, uploaded files).
 */
export function createRequest(ops) {
  const root = {}
  const uploads = []
  const chmods = []
  let inline = 0
  const dirOf = (path) => {
    let node = root
    const parts = path.split('/')
    for (let i = 0; i < parts.length - 1; i++) {
      const k = parts[i]
      node[k] ??= { type: 'dir', children: {} }
      if (node[k].type !== 'dir') throw new SandboxConfigurationError(`moat: ${where(parts.slice(0, i + 1).join('/'))} is not a directory but has entries under it`)
      node = node[k].children
    }
    return { node, name: parts[parts.length - 1] }
  }
  for (const o of ops) {
    const { node, name } = dirOf(o.path)
    if (o.op === 'dir') {
      node[name] ??= { type: 'dir', children: {} }
      if (o.mode !== undefined) chmods.push({ path: o.path, mode: o.mode })
      continue
    }
    if (node[name]) throw new SandboxConfigurationError(`moat: ${where(o.path)} is given twice`)
    if (o.op === 'git') {
      node[name] = { type: 'git_repo', repo: o.repo, ...(o.ref ? { ref: o.ref } : {}) }
      continue
    }
    let text = null
    if (inline + o.bytes.length <= INLINE_BUDGET && !o.bytes.includes(0)) {
      try {
        text = utf8.decode(o.bytes)
      } catch {}
    }
    if (text !== null && (o.mode === undefined || o.mode <= 0o777)) {
      inline += o.bytes.length
      node[name] = { type: 'file', content: text, ...(o.mode !== undefined ? { mode: o.mode } : {}) }
    } else {
      uploads.push(o)
      if (o.mode !== undefined) chmods.push({ path: o.path, mode: o.mode })
    }
  }
  return { manifest: { root: WORKSPACE, entries: root }, uploads, chmods }
}
