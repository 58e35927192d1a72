// MoatBackend's own operations against a real daemon: every effect is checked
// through moat's /v1 API (d.v1) or on the host, not only through the backend.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { rejection, tag } from '../../../tests/node/daemon.mjs'
import { useDaemon, useHostDir, clientOpts } from './daemon-fixture.mjs'
import { BaseSandbox, isSandboxBackend, isSandboxProtocol } from 'deepagents'
import { MoatSandbox, MoatError } from '../src/client.js'
import { MoatBackend, globRegExp } from '../src/deepagents.js'

const d = useDaemon()
const hostDir = useHostDir('moat-deep-host-')
const opts = clientOpts(d)

async function backend(o = {}) {
  return new MoatBackend(await MoatSandbox.create(opts), o)
}
const get = async (id, p) => d.v1('GET', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`)
const put = async (id, p, body) => {
  const r = await d.v1('PUT', `/v1/sandboxes/${id}/files?path=${encodeURIComponent(p)}`, Buffer.from(body))
  assert.equal(r.status, 204, r.body.toString())
}

test('is what the library takes for a sandbox backend; create owns its sandbox, close deletes it', async () => {
  const mark = tag()
  const b = await MoatBackend.create({ ...opts, metadata: { mark } })
  assert.ok(b instanceof BaseSandbox)
  assert.ok(isSandboxBackend(b))
  assert.ok(isSandboxProtocol(b))
  assert.equal(b.owned, true)
  const l = (await d.v1('GET', `/v1/sandboxes?metadata.mark=${mark}`)).json().sandboxes
  assert.deepEqual(l.map((s) => s.id), [b.id])
  await b.close()
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}`)).status, 404)
  await b.close() // idempotent

  // a backend on someone else's sandbox leaves it alone
  const sb = await MoatSandbox.create(opts)
  const c = new MoatBackend(sb)
  assert.equal(c.owned, false)
  await c.close()
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).status, 200)
  const again = await MoatBackend.connect(sb.id, opts)
  assert.equal(again.id, sb.id)
  await again.deleteSandbox()
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).status, 404)

  assert.throws(() => new MoatBackend({}), /must be a MoatSandbox/)
  assert.throws(() => new MoatBackend(sb, { timeoutMs: -1 }), /timeoutMs/)
  const e = await rejection(MoatBackend.connect('nosuchsandbox', opts))
  assert.ok(e instanceof MoatError && e.status === 404, String(e))
})

test('execute: output in order with stderr, exit codes, truncation, time limit', async () => {
  const b = await backend()
  const r = await b.execute('echo one; echo two >&2; echo three; pwd')
  assert.deepEqual(r, { output: 'one\ntwo\nthree\n/workspace\n', exitCode: 0, truncated: false })
  assert.deepEqual(await b.execute('exit 3'), { output: '', exitCode: 3, truncated: false })
  const nf = await b.execute('no-such-command-xyz')
  assert.equal(nf.exitCode, 127)
  assert.match(nf.output, /^(\/bin\/)?sh: 1: no-such-command-xyz: not found\n$/) // line 1: the command's own
  // the effect is in the sandbox, seen through /v1
  await b.execute('mkdir -p out && printf made > out/f.txt')
  assert.equal((await get(b.id, '/workspace/out/f.txt')).body.toString(), 'made')

  const small = await backend({ maxOutputBytes: 1000 })
  const t = await small.execute('head -c 100000 /dev/zero | tr "\\0" x; echo; exit 4')
  assert.equal(t.truncated, true)
  assert.equal(t.exitCode, 4)
  assert.ok(t.output.length <= 1000, `${t.output.length} bytes`)
  assert.match(t.output, /^x+$/)

  const slow = await backend({ timeoutMs: 500 })
  const t0 = Date.now()
  const s = await slow.execute('echo started; sleep 30')
  assert.ok(Date.now() - t0 < 20_000)
  assert.equal(s.exitCode, 137)
  assert.match(s.output, /^started\n\[moat: the command was killed after 500 ms\]$/)
  const ps = (await d.v1('GET', `/v1/sandboxes/${slow.id}/processes`)).json().processes
  assert.deepEqual(ps.filter((p) => p.running), [])

  await assert.rejects(() => b.execute(['ls']), /command must be a string/)
})

test('uploadFiles: text and binary bytes land exactly; per-file errors; partial success', async () => {
  const b = await backend()
  const bin = new Uint8Array(256).map((_, i) => i)
  const res = await b.uploadFiles([
    ['/workspace/bin/all.bytes', bin],
    ['notes/rel.txt', new TextEncoder().encode('relative\n')],
    ['/workspace', new Uint8Array([1])],
    ['/proc/self/moat', new Uint8Array([1])],
    ['/usr/moat-deep-test', new Uint8Array([1])],
    ['', new Uint8Array([1])],
    ['/workspace/bin/all.bytes/under-a-file', new Uint8Array([1])],
    ['/workspace/ok-after-errors.txt', new TextEncoder().encode('ok')],
  ])
  assert.deepEqual(res, [
    { path: '/workspace/bin/all.bytes', error: null },
    { path: 'notes/rel.txt', error: null },
    { path: '/workspace', error: 'is_directory' },
    { path: '/proc/self/moat', error: 'invalid_path' },
    { path: '/usr/moat-deep-test', error: 'permission_denied' },
    { path: '', error: 'invalid_path' },
    { path: '/workspace/bin/all.bytes/under-a-file', error: 'file_not_found' },
    { path: '/workspace/ok-after-errors.txt', error: null },
  ])
  assert.deepEqual([...(await get(b.id, '/workspace/bin/all.bytes')).body], [...bin])
  assert.equal((await get(b.id, '/workspace/notes/rel.txt')).body.toString(), 'relative\n')
  assert.equal((await get(b.id, '/workspace/ok-after-errors.txt')).body.toString(), 'ok')
  assert.equal((await get(b.id, '/workspace/bin/all.bytes')).body.length, 256)
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=/usr/moat-deep-test`)).status, 404)

  // bad arguments are refused before anything is written
  await assert.rejects(() => b.uploadFiles([['/workspace/first.txt', new Uint8Array([1])], ['/workspace/x', 'not bytes']]),
    /files\[1\] \(\/workspace\/x\): content must be a Uint8Array/)
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=/workspace/first.txt`)).status, 404)
  await assert.rejects(() => b.uploadFiles('x'), /expected an array/)
})

test('downloadFiles: exact bytes; per-file error codes; a gone sandbox throws', async () => {
  const b = await backend()
  const bin = Buffer.from([0, 255, 10, 13, 0x80, 0xfe, 0, 1])
  await put(b.id, '/workspace/blob.bin', bin)
  await put(b.id, '/workspace/t.txt', 'text\n')
  // a file the sandbox's user may not read (unless that user can read anything)
  const x = await b.execute('printf secret > locked && chmod 000 locked && mkdir d && cat locked >/dev/null 2>&1; echo $?')
  const canRead = x.output.trim() === '0'
  const res = await b.downloadFiles(['/workspace/blob.bin', 't.txt', '/workspace/missing', '/workspace/d',
    '/proc/self/environ', '/workspace/locked', ''])
  assert.equal(res.length, 7)
  assert.ok(res[0].content instanceof Uint8Array)
  assert.deepEqual([...res[0].content], [...bin])
  assert.equal(res[0].error, null)
  assert.equal(new TextDecoder().decode(res[1].content), 'text\n')
  assert.deepEqual(res.slice(2).map((r) => [r.path, r.content === null, r.error]), [
    ['/workspace/missing', true, 'file_not_found'],
    ['/workspace/d', true, 'is_directory'],
    ['/proc/self/environ', true, 'invalid_path'],
    ['/workspace/locked', !canRead, canRead ? null : 'permission_denied'],
    ['', true, 'invalid_path'],
  ])

  // the sandbox itself gone is not a per-file answer
  assert.equal((await d.v1('DELETE', `/v1/sandboxes/${b.id}`)).status, 204)
  const e = await rejection(b.downloadFiles(['/workspace/t.txt']))
  assert.ok(e instanceof MoatError && e.status === 404, String(e))
  const e2 = await rejection(b.uploadFiles([['/workspace/t.txt', new Uint8Array([1])]]))
  assert.ok(e2 instanceof MoatError && e2.status === 404, String(e2))
})

test('ls, read, readRaw, write, edit, delete through moat file API', async () => {
  const b = await backend()
  assert.deepEqual(await b.write('/workspace/src/app.py', 'a = 1\nb = 2\nc = 3\n'), { path: '/workspace/src/app.py', filesUpdate: null })
  assert.equal((await get(b.id, '/workspace/src/app.py')).body.toString(), 'a = 1\nb = 2\nc = 3\n')
  // a binary type's content is base64, as the library's write_file gives it
  await b.write('/workspace/img/dot.png', Buffer.from([0x89, 0x50, 0x4e, 0x47]).toString('base64'))
  assert.deepEqual([...(await get(b.id, '/workspace/img/dot.png')).body], [0x89, 0x50, 0x4e, 0x47])
  assert.match((await b.write('/usr/nope.txt', 'x')).error, /cannot write '\/usr\/nope.txt': \/usr\/nope.txt: Read-only file system/)

  const ls = await b.ls('/workspace')
  const names = ls.files.map((f) => f.path)
  assert.deepEqual(names, ['/workspace/img/', '/workspace/src/'])
  assert.equal(ls.files[0].is_dir, true)
  const inSrc = (await b.ls('/workspace/src')).files
  assert.deepEqual(inSrc.map((f) => [f.path, f.is_dir, f.size]), [['/workspace/src/app.py', false, 18]])
  assert.match(inSrc[0].modified_at, /^\d{4}-\d\d-\d\dT/)
  assert.match((await b.ls('/workspace/none')).error, /No such file or directory/)

  assert.deepEqual(await b.read('/workspace/src/app.py', 1, 1), {
    content: 'b = 2', mimeType: 'text/plain', totalLines: 3, startLine: 2, endLine: 2, nextOffset: 2,
  })
  const all = await b.read('/workspace/src/app.py')
  assert.equal(all.content, 'a = 1\nb = 2\nc = 3')
  assert.equal(all.nextOffset, undefined)
  const png = await b.read('/workspace/img/dot.png')
  assert.equal(png.mimeType, 'image/png')
  assert.deepEqual([...png.content], [0x89, 0x50, 0x4e, 0x47])
  assert.match((await b.read('/workspace/missing.txt')).error, /cannot read '\/workspace\/missing.txt': .*No such file/)
  await put(b.id, '/workspace/empty.txt', '')
  assert.match((await b.read('/workspace/empty.txt')).content, /empty contents/)
  await put(b.id, '/workspace/raw.dat', Buffer.from([0xff, 0xfe, 0]))
  assert.match((await b.read('/workspace/raw.dat')).error, /not UTF-8 text \(3 bytes\)/)
  const raw = await b.readRaw('/workspace/src/app.py')
  assert.equal(raw.data.content, 'a = 1\nb = 2\nc = 3\n')

  assert.deepEqual(await b.edit('/workspace/src/app.py', 'b = 2', 'b = 20'), { path: '/workspace/src/app.py', filesUpdate: null, occurrences: 1 })
  assert.equal((await get(b.id, '/workspace/src/app.py')).body.toString(), 'a = 1\nb = 20\nc = 3\n')
  assert.match((await b.edit('/workspace/src/app.py', ' = ', ' := ')).error, /Multiple occurrences \(3\)/)
  assert.equal((await get(b.id, '/workspace/src/app.py')).body.toString(), 'a = 1\nb = 20\nc = 3\n') // unchanged
  assert.equal((await b.edit('/workspace/src/app.py', ' = ', ' := ', true)).occurrences, 3)
  assert.equal((await get(b.id, '/workspace/src/app.py')).body.toString(), 'a := 1\nb := 20\nc := 3\n')
  assert.match((await b.edit('/workspace/src/app.py', 'zzz', 'y')).error, /String not found/)
  assert.match((await b.edit('/workspace/none.py', 'a', 'b')).error, /cannot edit '\/workspace\/none.py'/)

  assert.deepEqual(await b.delete('/workspace/src'), { path: '/workspace/src', filesUpdate: null })
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=/workspace/src`)).status, 404)
  assert.match((await b.delete('/workspace/src')).error, /cannot delete '\/workspace\/src'/)
})

test('glob and grep', async () => {
  const b = await backend()
  await b.uploadFiles([
    ['/workspace/a.py', new TextEncoder().encode('import os\nTODO: one\n')],
    ['/workspace/pkg/b.py', new TextEncoder().encode('x = 1 # TODO: two\n')],
    ['/workspace/pkg/deep/c.ts', new TextEncoder().encode('// TODO: three | a:b\n')],
    ['/workspace/pkg/deep/d.md', new TextEncoder().encode('no\n')],
    ['/workspace/odd:name.txt', new TextEncoder().encode('TODO: colon in name\n')],
    ['/workspace/pic.png', new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x54, 0x4f, 0x44, 0x4f])],
  ])
  const paths = (r) => r.files.map((f) => f.path)
  assert.deepEqual(paths(await b.glob('**/*.py', '/workspace')), ['/workspace/a.py', '/workspace/pkg/b.py'])
  assert.deepEqual(paths(await b.glob('*.py', '/workspace')), ['/workspace/a.py'])
  assert.deepEqual(paths(await b.glob('./pkg/*.py', '/workspace')), ['/workspace/pkg/b.py'])
  assert.deepEqual(paths(await b.glob('/workspace/pkg/**/*.{ts,md}')), ['/workspace/pkg/deep/c.ts', '/workspace/pkg/deep/d.md'])
  assert.deepEqual(paths(await b.glob('pkg/*', '/workspace')), ['/workspace/pkg/b.py', '/workspace/pkg/deep/'])
  assert.deepEqual(paths(await b.glob('pkg/deep/c.ts', '/workspace')), ['/workspace/pkg/deep/c.ts'])
  assert.deepEqual(paths(await b.glob('nothere/**/*.py', '/workspace')), [])
  assert.match((await b.glob('*.py', '/proc')).error, /outside the sandbox/)

  const g = await b.grep('TODO:', '/workspace')
  assert.deepEqual(g.matches.map((m) => [m.path, m.line, m.text]).sort(), [
    ['/workspace/a.py', 2, 'TODO: one'],
    ['/workspace/odd:name.txt', 1, 'TODO: colon in name'],
    ['/workspace/pkg/b.py', 1, 'x = 1 # TODO: two'],
    ['/workspace/pkg/deep/c.ts', 1, '// TODO: three | a:b'],
  ])
  // literal, not a regex; glob filters file names; maxCount caps
  assert.deepEqual((await b.grep('three | a:b', '/workspace')).matches.map((m) => m.path), ['/workspace/pkg/deep/c.ts'])
  assert.deepEqual((await b.grep('.*', '/workspace')).matches, [])
  assert.deepEqual((await b.grep('TODO', '/workspace', '*.py')).matches.map((m) => m.path).sort(), ['/workspace/a.py', '/workspace/pkg/b.py'])
  const capped = await b.grep('TODO', '/workspace', null, 2)
  assert.equal(capped.matches.length, 2)
  assert.equal(capped.truncated, true)
  assert.deepEqual((await b.grep('TODO', '/workspace/a.py')).matches.map((m) => m.line), [2])
  // shell syntax in the arguments is only data
  const canary = `/workspace/canary-${tag()}`
  assert.deepEqual((await b.grep(`'; touch ${canary}; '`, '/workspace', `$(touch ${canary})`)).matches, [])
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=${canary}`)).status, 404)
  assert.match((await b.grep('x', '/workspace/none')).error, /path '\/workspace\/none' not found/)

  // no path or "/": the search root, by default the workspace (not the host image's /usr)
  assert.deepEqual((await b.grep('TODO:', '/')).matches, g.matches)
  assert.deepEqual((await b.grep('TODO:')).matches, g.matches)
  assert.deepEqual(paths(await b.glob('**/*.py')), ['/workspace/a.py', '/workspace/pkg/b.py'])
  await b.uploadFiles([['/tmp/elsewhere/TODO.py', new TextEncoder().encode('TODO: in tmp\n')]])
  const wide = new MoatBackend(b.sandbox, { searchRoot: '/tmp' })
  assert.deepEqual((await wide.grep('TODO:', '/')).matches.map((m) => m.path), ['/tmp/elsewhere/TODO.py'])
  assert.deepEqual(paths(await wide.glob('**/*.py')), ['/tmp/elsewhere/TODO.py'])
  assert.throws(() => new MoatBackend(b.sandbox, { searchRoot: 'rel' }), /searchRoot must be an absolute path/)

  assert.ok(globRegExp('**/x.js').test('x.js'))
  assert.ok(globRegExp('a/**/x.js').test('a/x.js'))
  assert.ok(!globRegExp('*.js').test('a/x.js'))
  assert.ok(globRegExp('[!a]?.c').test('bz.c'))
  assert.throws(() => globRegExp('{a,b'), /unclosed/)
})

test('confinement: paths and commands aimed at host files leave them unchanged and unread', async () => {
  const b = await backend()
  const secret = path.join(hostDir, 'secret.txt')
  fs.writeFileSync(secret, 'host secret\n')
  const before = fs.statSync(secret)

  // the host's /tmp is not the sandbox's: the same path is the sandbox's own file
  assert.deepEqual(await b.downloadFiles([secret]), [{ path: secret, content: null, error: 'file_not_found' }])
  assert.deepEqual(await b.uploadFiles([[secret, new TextEncoder().encode('pwned')]]), [{ path: secret, error: null }])
  await b.write(secret, 'pwned by write')
  await b.edit(secret, 'pwned', 'owned')
  await b.uploadFiles([[`../../../..${secret}`, new TextEncoder().encode('pwned via ..')]])
  const ex = await b.execute(`cat ${secret}; echo pwned-by-exec >> ${secret}; cat ${d.tokenFile}; ls ${d.data}`)
  assert.doesNotMatch(ex.output, /host secret/)
  assert.ok(!ex.output.includes(d.token), 'the daemon token file was readable inside the sandbox')
  await b.execute(`ln -s /proc/1/root${secret} /workspace/link; echo via-link > /workspace/link`)
  assert.deepEqual((await b.downloadFiles(['/proc/1/root' + secret]))[0].error, 'invalid_path')
  assert.equal((await b.write('/proc/1/root' + secret, 'x')).error !== undefined, true)
  // those writes happened, in the sandbox's own /tmp (seen through /v1)
  assert.equal((await get(b.id, secret)).body.toString(), 'pwned via ..pwned-by-exec\n')
  assert.equal((await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=/workspace/link`)).status, 200)
  assert.equal((await b.delete(secret)).path, secret) // the sandbox's copy

  // the host file: same bytes, same inode, not modified
  assert.equal(fs.readFileSync(secret, 'utf8'), 'host secret\n')
  const after = fs.statSync(secret)
  assert.equal(after.ino, before.ino)
  assert.equal(after.mtimeMs, before.mtimeMs)
  assert.equal(fs.readFileSync(d.tokenFile, 'utf8').trim(), d.token)
})
