// MoatSandbox against a real daemon: every call's effect is checked through
// moat's own /v1 API (d.v1), not only through the client's answers.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { freePort, rejection, tag } from '../../../tests/node/daemon.mjs'
import { useDaemon, clientOpts } from './daemon-fixture.mjs'
import { MoatSandbox, MoatError } from '../src/client.js'

const d = useDaemon()
const opts = clientOpts(d)

test('create with manifest, env and metadata; connect; list; delete is idempotent', async () => {
  const mark = tag()
  const sb = await MoatSandbox.create({
    ...opts,
    env: { GREETING: 'hi' },
    metadata: { suite: 'client', mark },
    manifest: { entries: { 'a.txt': { type: 'file', content: 'A\n' }, sub: { type: 'dir' } } },
    idleTimeoutS: 600,
  })
  assert.match(sb.id, /^[a-z0-9]+$/)
  assert.equal(sb.baseUrl, d.url)
  assert.equal(sb.info.state, 'running')
  const g = await d.v1('GET', `/v1/sandboxes/${sb.id}`)
  assert.equal(g.status, 200)
  assert.equal(g.json().metadata.mark, mark)
  assert.equal(g.json().idle_timeout_s, 600)
  const f = await d.v1('GET', `/v1/sandboxes/${sb.id}/files?path=a.txt`)
  assert.equal(f.body.toString(), 'A\n')
  const st = await d.v1('GET', `/v1/sandboxes/${sb.id}/files/stat?path=sub`)
  assert.equal(st.json().type, 'dir')
  const r = await sb.exec('printf %s "$GREETING"')
  assert.equal(r.stdout, 'hi')

  const same = await MoatSandbox.connect(sb.id, opts)
  assert.equal(same.id, sb.id)
  assert.equal(same.info.metadata.mark, mark)
  const listed = await MoatSandbox.list({ ...opts, metadata: { mark } })
  assert.deepEqual(listed.map((b) => b.id), [sb.id])
  assert.deepEqual(await MoatSandbox.list({ ...opts, metadata: { mark: 'other' } }), [])

  await sb.delete()
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).status, 404)
  await sb.delete() // already gone: no error
  const e = await rejection(MoatSandbox.connect(sb.id, opts))
  assert.ok(e instanceof MoatError)
  assert.equal(e.status, 404)
  assert.equal(e.code, 'not_found')
  assert.match(e.message, new RegExp(sb.id))
})

test('errors: moat code and message; bad token is 401; unreachable daemon names the URL', async () => {
  const e = await rejection(MoatSandbox.create({ ...opts, limits: { bogus: 1 } }))
  assert.ok(e instanceof MoatError)
  assert.equal(e.status, 400)
  assert.equal(e.code, 'invalid_request')
  assert.match(e.message, /bogus/)
  const u = await rejection(MoatSandbox.list({ baseUrl: d.url, token: 'e2b_wrong' }))
  assert.equal(u.status, 401)
  assert.equal(u.code, 'unauthorized')
  const before = (await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length
  const closed = await freePort() // nothing listens there
  const n = await rejection(MoatSandbox.create({ baseUrl: `http://127.0.0.1:${closed}`, token: d.token }))
  assert.ok(!(n instanceof MoatError))
  assert.match(n.message, new RegExp(`cannot reach http://127\\.0\\.0\\.1:${closed}/v1/sandboxes: ECONNREFUSED`))
  assert.equal((await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length, before)
})

test('defaults come from MOAT_URL and MOAT_API_TOKEN', async () => {
  const saved = { u: process.env.MOAT_URL, t: process.env.MOAT_API_TOKEN }
  process.env.MOAT_URL = d.url + '/'
  process.env.MOAT_API_TOKEN = d.token
  try {
    const sb = await MoatSandbox.create()
    assert.equal(sb.baseUrl, d.url)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).status, 200)
    await sb.delete()
  } finally {
    for (const [k, v] of [['MOAT_URL', saved.u], ['MOAT_API_TOKEN', saved.t]]) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
})

test('exec: exit codes, cwd, env, stdin, argv, timeout, truncation; yield, writeStdin, kill, processes', async () => {
  const sb = await MoatSandbox.create(opts)
  try {
    let r = await sb.exec('echo out; echo err >&2; exit 3')
    assert.equal(r.exit_code, 3)
    assert.equal(r.stdout, 'out\n')
    assert.equal(r.stderr, 'err\n')
    await sb.mkdir('deep/er')
    r = await sb.exec('pwd; printf %s "$X"', { cwd: 'deep/er', env: { X: 'y' } })
    assert.equal(r.stdout, '/workspace/deep/er\ny')
    r = await sb.exec(['cat'], { stdin: 'from stdin' })
    assert.equal(r.stdout, 'from stdin')
    r = await sb.exec('sleep 5', { timeoutMs: 200 })
    assert.equal(r.timed_out, true)
    r = await sb.exec('head -c 5000 /dev/zero | tr "\\0" a', { maxOutputBytes: 100 })
    assert.equal(r.truncated, true)
    assert.equal(r.stdout.length, 100)

    r = await sb.exec('read line; echo "got $line"; sleep 30', { yieldMs: 100 })
    assert.equal(r.running, true)
    assert.equal(typeof r.process_id, 'number')
    const pid = r.process_id
    const ps = await d.v1('GET', `/v1/sandboxes/${sb.id}/processes`)
    assert.ok(ps.json().processes.some((p) => p.process_id === pid && p.running))
    assert.ok((await sb.processes()).some((p) => p.process_id === pid))
    r = await sb.writeStdin(pid, 'hello\n', { yieldMs: 300 })
    assert.equal(r.running, true)
    assert.match(r.stdout, /got hello/)
    await sb.kill(pid, 'TERM')
    r = await sb.writeStdin(pid, '', { yieldMs: 2000 })
    assert.equal(r.running, false)
    assert.equal(r.exit_code, 128 + 15)
    const gone = await rejection(sb.writeStdin(pid, 'x'))
    assert.equal(gone.status, 404)
  } finally {
    await sb.delete()
  }
})

test('files: write/read bytes and text, list, stat, exists, remove, mkdir', async () => {
  const sb = await MoatSandbox.create(opts)
  try {
    const bin = new Uint8Array([0, 1, 2, 255, 254, 10])
    await sb.writeFile('d/bin.dat', bin)
    await sb.writeFile('d/t.txt', 'héllo\n')
    const raw = await d.v1('GET', `/v1/sandboxes/${sb.id}/files?path=d/bin.dat`)
    assert.deepEqual(new Uint8Array(raw.body), bin)
    assert.deepEqual(await sb.readFile('d/bin.dat'), bin)
    assert.equal(await sb.readText('/workspace/d/t.txt'), 'héllo\n')
    const l = await sb.list('d')
    assert.equal(l.truncated, false)
    assert.deepEqual(l.entries.map((e) => e.name).sort(), ['bin.dat', 't.txt'])
    const st = await sb.stat('d/t.txt')
    assert.equal(st.type, 'file')
    assert.equal(st.size, Buffer.byteLength('héllo\n'))
    assert.equal(st.path, '/workspace/d/t.txt')
    assert.equal(await sb.stat('nope'), null)
    assert.equal(await sb.exists('d'), true)
    assert.equal(await sb.exists('nope'), false)
    await sb.mkdir('m/n/o')
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files/stat?path=m/n/o`)).json().type, 'dir')
    await sb.remove('d/t.txt')
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files/stat?path=d/t.txt`)).status, 404)
    const nr = await rejection(sb.remove('m'))
    assert.ok(nr instanceof MoatError)
    await sb.remove('m', { recursive: true })
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files/stat?path=m`)).status, 404)
    const esc = await rejection(sb.readFile('/proc/self/environ'))
    assert.equal(esc.code, 'invalid_path')
    const nf = await rejection(sb.readFile('nope'))
    assert.equal(nf.status, 404)
  } finally {
    await sb.delete()
  }
  // a deleted sandbox: stat is an error, not "absent"
  const e = await rejection(sb.stat('x'))
  assert.equal(e.status, 404)
})

test('patch: all or nothing; image; archive round trip', async () => {
  const sb = await MoatSandbox.create(opts)
  try {
    await sb.writeFile('a.txt', 'one\ntwo\n')
    const r = await sb.patch('*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n*** Add File: b.txt\n+bee\n*** End Patch\n')
    assert.deepEqual(r.files.map((f) => f.path).sort(), ['/workspace/a.txt', '/workspace/b.txt'])
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files?path=a.txt`)).body.toString(), 'one\nTWO\n')
    const e = await rejection(sb.patch('*** Begin Patch\n*** Add File: c.txt\n+c\n*** Update File: a.txt\n@@\n-absent\n+x\n*** End Patch\n'))
    assert.equal(e.status, 422)
    assert.equal(e.code, 'patch_failed')
    assert.match(e.message, /a\.txt/)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files/stat?path=c.txt`)).status, 404)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files?path=a.txt`)).body.toString(), 'one\nTWO\n')

    // 1x1 PNG
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==', 'base64')
    await sb.writeFile('p.png', new Uint8Array(png))
    const img = await sb.image('p.png')
    assert.equal(img.mime, 'image/png')
    assert.equal(img.width, 1)
    assert.deepEqual(Buffer.from(img.data, 'base64'), png)
    assert.equal((await rejection(sb.image('a.txt'))).status, 415)

    const tar = await sb.archive()
    assert.ok(tar.length > 512)
    const other = await MoatSandbox.create(opts)
    try {
      await other.restoreArchive(tar)
      assert.equal((await d.v1('GET', `/v1/sandboxes/${other.id}/files?path=b.txt`)).body.toString(), 'bee\n')
      assert.deepEqual(new Uint8Array((await d.v1('GET', `/v1/sandboxes/${other.id}/files?path=p.png`)).body), new Uint8Array(png))
    } finally {
      await other.delete()
    }
  } finally {
    await sb.delete()
  }
})
