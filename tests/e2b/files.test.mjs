// files through the unchanged e2b SDK: text and bytes, list with depth,
// exists, getInfo, makeDir, rename, remove, multi-file writes, 10 MiB byte
// for byte, signed upload/download URLs fetched without headers (and refused
// when expired or forged), watchDir events.
import assert from 'node:assert/strict'
import crypto from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { FileNotFoundError, FileType, FilesystemEventType, NotFoundError, Sandbox } from 'e2b'
import { rejection, sha256, sleep, startDaemon, tag, waitFor, withTimeout } from './harness.mjs'

let d, s
before(async () => {
  d = await startDaemon()
  s = await Sandbox.create()
}, { timeout: 90_000 })
after(async () => {
  await s?.kill().catch(() => {})
  await d?.stop()
}, { timeout: 60_000 })

const H = '/home/user'

describe('files', { timeout: 240_000 }, () => {
  it('write and read text', async () => {
    const info = await s.files.write(`${H}/t/hello.txt`, 'héllo\nwörld\n')
    assert.equal(info.path, `${H}/t/hello.txt`)
    assert.equal(info.name, 'hello.txt')
    assert.equal(await s.files.read(`${H}/t/hello.txt`), 'héllo\nwörld\n')
    // the command side sees the same bytes, owned by the default user
    const r = await s.commands.run(`cat ${H}/t/hello.txt; stat -c %u ${H}/t/hello.txt`)
    assert.equal(r.stdout, 'héllo\nwörld\n1000\n')
    // overwrite
    await s.files.write(`${H}/t/hello.txt`, 'short')
    assert.equal(await s.files.read(`${H}/t/hello.txt`), 'short')
  })

  it('relative paths resolve against the home of the user', async () => {
    await s.files.write('rel.txt', 'relative')
    assert.equal(await s.files.read(`${H}/rel.txt`), 'relative')
  })

  it('write and read bytes (every byte value)', async () => {
    const all = new Uint8Array(256 * 4)
    for (let i = 0; i < all.length; i++) all[i] = i % 256
    await s.files.write(`${H}/bin/all.bin`, all.buffer)
    const back = await s.files.read(`${H}/bin/all.bin`, { format: 'bytes' })
    assert.ok(back instanceof Uint8Array)
    assert.deepEqual(Buffer.from(back), Buffer.from(all))
    const blob = await s.files.read(`${H}/bin/all.bin`, { format: 'blob' })
    assert.deepEqual(Buffer.from(await blob.arrayBuffer()), Buffer.from(all))
    // an empty file
    await s.files.write(`${H}/bin/empty`, '')
    assert.equal(await s.files.read(`${H}/bin/empty`), '')
  })

  it('list with depth, exists, getInfo', async () => {
    const base = `${H}/tree-${tag()}`
    await s.files.write(`${base}/a.txt`, 'aaa')
    await s.files.write(`${base}/sub/b.txt`, 'bb')
    await s.files.write(`${base}/sub/deeper/c.txt`, 'c')

    const one = await s.files.list(base)
    assert.deepEqual(one.map((e) => e.name).sort(), ['a.txt', 'sub'])
    const a = one.find((e) => e.name === 'a.txt')
    assert.equal(a.type, FileType.FILE)
    assert.equal(a.path, `${base}/a.txt`)
    assert.equal(a.size, 3)
    assert.equal(one.find((e) => e.name === 'sub').type, FileType.DIR)

    const two = await s.files.list(base, { depth: 2 })
    const paths = two.map((e) => e.path).sort()
    assert.deepEqual(paths, [`${base}/a.txt`, `${base}/sub`, `${base}/sub/b.txt`, `${base}/sub/deeper`])

    const three = await s.files.list(base, { depth: 3 })
    assert.ok(three.some((e) => e.path === `${base}/sub/deeper/c.txt`))

    assert.equal(await s.files.exists(`${base}/a.txt`), true)
    assert.equal(await s.files.exists(`${base}/sub`), true)
    assert.equal(await s.files.exists(`${base}/nope`), false)

    const fi = await s.files.getInfo(`${base}/sub/b.txt`)
    assert.equal(fi.type, FileType.FILE)
    assert.equal(fi.size, 2)
    assert.equal(fi.name, 'b.txt')
    assert.equal(fi.path, `${base}/sub/b.txt`)
    assert.equal(fi.owner, 'user')
    assert.ok(fi.modifiedTime instanceof Date && Math.abs(fi.modifiedTime - Date.now()) < 120_000)
    const di = await s.files.getInfo(`${base}/sub`)
    assert.equal(di.type, FileType.DIR)

    // a symlink reports its target
    await s.commands.run(`ln -s ${base}/a.txt ${base}/link`)
    const li = await s.files.getInfo(`${base}/link`)
    assert.equal(li.symlinkTarget, `${base}/a.txt`)
  })

  it('makeDir: true when made, false when it exists', async () => {
    const p = `${H}/mk-${tag()}/x/y`
    assert.equal(await s.files.makeDir(p), true)
    assert.equal((await s.files.getInfo(p)).type, FileType.DIR)
    assert.equal(await s.files.makeDir(p), false)
  })

  it('rename and remove', async () => {
    const p = `${H}/mv-${tag()}`
    await s.files.write(`${p}/old.txt`, 'moving')
    const e = await s.files.rename(`${p}/old.txt`, `${p}/new.txt`)
    assert.equal(e.path, `${p}/new.txt`)
    assert.equal(e.name, 'new.txt')
    assert.equal(await s.files.exists(`${p}/old.txt`), false)
    assert.equal(await s.files.read(`${p}/new.txt`), 'moving')
    const missing = await rejection(s.files.rename(`${p}/old.txt`, `${p}/x.txt`))
    assert.ok(missing instanceof NotFoundError, `got ${missing?.constructor?.name}`)

    await s.files.remove(`${p}/new.txt`)
    assert.equal(await s.files.exists(`${p}/new.txt`), false)
    // a directory, recursively
    await s.files.write(`${p}/d/e/f.txt`, 'x')
    await s.files.remove(`${p}/d`)
    assert.equal(await s.files.exists(`${p}/d`), false)
  })

  it('write of many files at once', async () => {
    const base = `${H}/many-${tag()}`
    const files = Array.from({ length: 20 }, (_, i) => ({ path: `${base}/${i % 3}/f${i}.txt`, data: `file ${i}\n` }))
    const infos = await s.files.write(files)
    assert.equal(infos.length, files.length)
    assert.deepEqual(infos.map((x) => x.path).sort(), files.map((f) => f.path).sort())
    for (const f of [files[0], files[7], files[19]]) assert.equal(await s.files.read(f.path), f.data)
    const r = await s.commands.run(`find ${base} -type f | wc -l`)
    assert.equal(r.stdout.trim(), '20')
  })

  it('10 MiB up and down, byte for byte', async () => {
    const big = crypto.randomBytes(10 << 20)
    const ab = big.buffer.slice(big.byteOffset, big.byteOffset + big.byteLength)
    await withTimeout(s.files.write(`${H}/big.bin`, ab), 60_000, 'the 10 MiB upload')
    const r = await s.commands.run(`sha256sum ${H}/big.bin`)
    assert.equal(r.stdout.split(' ')[0], sha256(big))
    const back = await withTimeout(s.files.read(`${H}/big.bin`, { format: 'bytes' }), 60_000, 'the 10 MiB download')
    assert.equal(back.length, big.length)
    assert.equal(sha256(back), sha256(big))
    // streamed read too
    const st = await s.files.read(`${H}/big.bin`, { format: 'stream' })
    const parts = []
    for await (const c of st) parts.push(c)
    assert.equal(sha256(Buffer.concat(parts)), sha256(big))
  })

  it('a missing file is FileNotFoundError (a NotFoundError)', async () => {
    const e = await rejection(s.files.read(`${H}/missing-${tag()}`))
    assert.ok(e instanceof FileNotFoundError || e instanceof NotFoundError, `got ${e?.constructor?.name}: ${e?.message}`)
    const e2 = await rejection(s.files.getInfo(`${H}/missing-${tag()}`))
    assert.ok(e2 instanceof NotFoundError, `got ${e2?.constructor?.name}: ${e2?.message}`)
    const e3 = await rejection(s.files.list(`${H}/missing-${tag()}`))
    assert.ok(e3 instanceof NotFoundError, `got ${e3?.constructor?.name}: ${e3?.message}`)
  })
})

describe('signed URLs', { timeout: 240_000 }, () => {
  it('downloadUrl and uploadUrl work with a plain fetch, no headers', async () => {
    const p = `${H}/signed-${tag()}.txt`
    await s.files.write(p, 'signed content')
    const url = await s.downloadUrl(p)
    assert.ok(url.startsWith(d.url + '/files?'), url)
    assert.ok(new URL(url).searchParams.get('signature')?.startsWith('v1_'), url)
    const r = await fetch(url, { signal: AbortSignal.timeout(20_000) })
    assert.equal(r.status, 200, await r.clone().text())
    assert.equal(await r.text(), 'signed content')

    const up = `${H}/uploaded-${tag()}.txt`
    const uurl = await s.uploadUrl(up)
    const form = new FormData()
    form.append('file', new Blob(['via upload url']), up)
    const u = await fetch(uurl, { method: 'POST', body: form, signal: AbortSignal.timeout(20_000) })
    assert.equal(u.status, 200, await u.clone().text())
    const j = await u.json()
    assert.ok(Array.isArray(j) && j.length === 1 && j[0].path === up, JSON.stringify(j))
    assert.equal(await s.files.read(up), 'via upload url')
  })

  it('an expired or forged signature is refused', async () => {
    const p = `${H}/secret-${tag()}.txt`
    const content = `do-not-leak-${tag()}`
    await s.files.write(p, content)

    const expiring = await s.downloadUrl(p, { useSignatureExpiration: 1 })
    assert.ok(new URL(expiring).searchParams.get('signature_expiration'), expiring)
    await sleep(2500)
    const r1 = await fetch(expiring, { signal: AbortSignal.timeout(20_000) })
    const b1 = await r1.text()
    assert.ok(r1.status >= 400, `expired URL answered ${r1.status}`)
    assert.ok(!b1.includes(content), b1)
    // envd's own answer (E2B's shape), not moat's /v1 bearer refusal
    assert.equal(r1.status, 401, b1)
    assert.equal(JSON.parse(b1).code, 401, b1)

    const good = new URL(await s.downloadUrl(p))
    const sig = good.searchParams.get('signature')
    const forged = new URL(good)
    forged.searchParams.set('signature', sig.slice(0, -2) + (sig.endsWith('AA') ? 'BB' : 'AA'))
    const r2 = await fetch(forged, { signal: AbortSignal.timeout(20_000) })
    const b2 = await r2.text()
    assert.ok(r2.status >= 400, `forged signature answered ${r2.status}`)
    assert.ok(!b2.includes(content), b2)

    // a signature for one path does not open another
    const p2 = `${H}/secret2-${tag()}.txt`
    const content2 = `do-not-leak-either-${tag()}`
    await s.files.write(p2, content2)
    const other = new URL(good)
    other.searchParams.set('path', p2)
    const r3 = await fetch(other, { signal: AbortSignal.timeout(20_000) })
    const b3 = await r3.text()
    assert.ok(r3.status >= 400, `a signature for ${p} opened ${p2}: ${r3.status}`)
    assert.ok(!b3.includes(content2), b3)

    // no signature at all, no headers
    const bare = new URL(good)
    bare.searchParams.delete('signature')
    const r4 = await fetch(bare, { signal: AbortSignal.timeout(20_000) })
    const b4 = await r4.text()
    assert.ok(r4.status >= 400, `unsigned download answered ${r4.status}`)
    assert.ok(!b4.includes(content), b4)

    // an upload signature does not download (operation is signed)
    const w = new URL(await s.uploadUrl(p))
    const asRead = new URL(good)
    asRead.searchParams.set('signature', w.searchParams.get('signature'))
    const r5 = await fetch(asRead, { signal: AbortSignal.timeout(20_000) })
    const b5 = await r5.text()
    assert.ok(r5.status >= 400, `an upload signature downloaded: ${r5.status}`)
    assert.ok(!b5.includes(content), b5)
  })
})

describe('watchDir', { timeout: 240_000 }, () => {
  it('sees create, write and remove', async () => {
    const dir = `${H}/watched-${tag()}`
    await s.files.makeDir(dir)
    const events = []
    const w = await s.files.watchDir(dir, (e) => { events.push(e) }, { timeoutMs: 30_000 })
    try {
      await s.files.write(`${dir}/new.txt`, 'one')
      await s.commands.run(`echo more >> ${dir}/new.txt`)
      await waitFor(() => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.WRITE),
        { timeout: 10_000, what: `a write event in ${JSON.stringify(events)}` })
      await s.files.remove(`${dir}/new.txt`)
      await waitFor(() => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.REMOVE),
        { timeout: 10_000, what: `a remove event in ${JSON.stringify(events)}` })
      assert.ok(events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE), JSON.stringify(events))
    } finally {
      await w.stop()
    }
    // stopped: no more events
    const n = events.length
    await s.files.write(`${dir}/after-stop.txt`, 'x')
    await sleep(500)
    assert.ok(!events.slice(n).some((e) => e.name === 'after-stop.txt'), JSON.stringify(events.slice(n)))
  })

  it('recursive watch sees a file in a subdirectory', async () => {
    const dir = `${H}/rwatched-${tag()}`
    await s.files.makeDir(`${dir}/sub`)
    const events = []
    const w = await s.files.watchDir(dir, (e) => { events.push(e) }, { recursive: true, timeoutMs: 30_000 })
    try {
      await s.files.write(`${dir}/sub/deep.txt`, 'x')
      await waitFor(() => events.some((e) => e.name === 'sub/deep.txt'),
        { timeout: 10_000, what: `sub/deep.txt in ${JSON.stringify(events)}` })
    } finally {
      await w.stop()
    }
  })

  it('watching a missing directory fails', async () => {
    const e = await rejection(s.files.watchDir(`${H}/no-such-${tag()}`, () => {}, { timeoutMs: 10_000 }))
    assert.ok(e instanceof NotFoundError, `got ${e?.constructor?.name}: ${e?.message}`)
  })
})
