// MoatSandbox's image store, snapshot, fork, restore and pause calls against
// a real daemon and a real loopback registry (tests/oci/fixture.py through
// registry-helper.py): each effect checked through moat's own /v1 API or
// the sandbox's files, not only through the client's answers.
import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { rejection, tag, withTimeout } from '../../../tests/node/daemon.mjs'
import { useDaemon, clientOpts } from './daemon-fixture.mjs'
import { MoatSandbox, MoatError } from '../src/client.js'

const d = useDaemon()
const opts = clientOpts(d)

let reg, ref, layout
before(async () => {
  reg = spawn('python3', [fileURLToPath(new URL('./registry-helper.py', import.meta.url)), 'multi'],
    { stdio: ['pipe', 'pipe', 'inherit'] })
  let out = ''
  reg.stdout.on('data', (b) => { out += b })
  await withTimeout(new Promise((resolve, reject) => {
    reg.stdout.on('data', () => { if (out.split('\n').length > 2) resolve() })
    reg.on('exit', (c) => reject(new Error(`registry-helper.py exited ${c}`)))
  }), 120_000, 'the registry and its image')
  ;[ref, layout] = out.trim().split('\n')
}, { timeout: 150_000 })
after(async () => {
  if (reg && reg.exitCode === null) {
    reg.stdin.end()
    await withTimeout(once(reg, 'exit'), 30_000, 'registry-helper.py to stop').catch(() => reg.kill('SIGKILL'))
  }
})

test('images: pull with progress, list, inspect, create from it, remove', { timeout: 180_000 }, async () => {
  const seen = []
  const img = await MoatSandbox.pullImage(ref, { ...opts, insecure: true, onProgress: (p) => seen.push(p) })
  assert.ok(img.id?.startsWith('sha256:'), JSON.stringify(img))
  assert.ok(img.names.includes(ref), JSON.stringify(img.names))
  assert.ok(seen.length >= 1, 'no progress event')
  const last = seen[seen.length - 1]
  assert.equal(last.layers_total, 2)
  assert.ok(last.bytes_done <= last.bytes_total || last.bytes_total === 0, JSON.stringify(last))
  // the daemon's store has it
  const listed = (await d.v1('GET', '/v1/images')).json().images
  assert.ok(listed.some((i) => i.id === img.id))
  assert.deepEqual((await MoatSandbox.listImages(opts)).map((i) => i.id), listed.map((i) => i.id))
  const full = await MoatSandbox.inspectImage(ref, opts)
  assert.equal(full.id, img.id)
  assert.equal(full.layers.length, 2)
  assert.ok(JSON.stringify(full.config).includes('MOAT_IMAGE=multi'), JSON.stringify(full.config))
  // a second pull without progress: the same image
  assert.equal((await MoatSandbox.pullImage(ref, { ...opts, insecure: true })).id, img.id)

  const sb = await MoatSandbox.create({ ...opts, image: ref })
  const r = await sb.exec('echo $MOAT_IMAGE')
  assert.equal(r.stdout.trim(), 'multi')
  // in use: refused, and still there
  const e = await rejection(MoatSandbox.removeImage(ref, opts), 30_000, 'removing an image in use')
  assert.ok(e instanceof MoatError && e.status === 409, `${e?.name}: ${e?.message}`)
  await sb.delete()
  await MoatSandbox.removeImage(img.id, opts)
  assert.ok(!(await d.v1('GET', '/v1/images')).json().images.some((i) => i.id === img.id), 'the image is still stored')
  const e2 = await rejection(MoatSandbox.inspectImage(img.id, opts), 30_000, 'inspecting a removed image')
  assert.equal(e2.status, 404)
})

test('pull errors are MoatErrors naming the culprit (stream or not)', { timeout: 60_000 }, async () => {
  const bad = ref.replace('moat/js', 'moat/nosuch')
  for (const onProgress of [undefined, () => {}]) {
    const e = await rejection(MoatSandbox.pullImage(bad, { ...opts, insecure: true, onProgress }), 30_000, 'a pull of no image')
    assert.ok(e instanceof MoatError, `${e?.name}: ${e?.message}`)
    assert.match(e.message, /nosuch/)
  }
  assert.ok(!(await d.v1('GET', '/v1/images')).json().images.some((i) => i.names.includes(bad)))
})

test('snapshot, create from it, restore, fork, delete', { timeout: 120_000 }, async () => {
  const sb = await MoatSandbox.create(opts)
  await sb.writeFile('state.txt', 'one')
  const name = 'js-' + tag(6)
  const snap = await sb.snapshot({ name })
  assert.equal(snap.name, name)
  assert.equal(snap.sandbox_id, sb.id)
  assert.ok((await d.v1('GET', '/v1/snapshots')).json().snapshots.some((s) => s.id === snap.id))
  assert.equal((await MoatSandbox.getSnapshot(name, opts)).id, snap.id)
  assert.ok((await MoatSandbox.listSnapshots(opts)).some((s) => s.id === snap.id))

  await sb.writeFile('state.txt', 'two')
  const copy = await MoatSandbox.create({ ...opts, image: `snapshot:${snap.id}` })
  assert.equal((await d.v1('GET', `/v1/sandboxes/${copy.id}/files?path=state.txt`)).body.toString(), 'one')

  const r = await sb.restore(snap.id)
  assert.equal(r.processes, 'restarted')
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}/files?path=state.txt`)).body.toString(), 'one')

  await sb.writeFile('state.txt', 'three')
  const forks = await sb.fork(2)
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof MoatSandbox)
    assert.notEqual(f.id, sb.id)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${f.id}/files?path=state.txt`)).body.toString(), 'three')
  }
  const bad = await rejection(sb.fork(0), 30_000, 'a fork of 0')
  assert.equal(bad.status, 400)

  await MoatSandbox.deleteSnapshot(snap.id, opts)
  assert.ok(!(await d.v1('GET', '/v1/snapshots')).json().snapshots.some((s) => s.id === snap.id))
  const gone = await rejection(MoatSandbox.getSnapshot(snap.id, opts), 30_000, 'a deleted snapshot')
  assert.equal(gone.status, 404)
  for (const x of [sb, copy, ...forks]) await x.delete()
})

test('pause and resume', { timeout: 60_000 }, async () => {
  const sb = await MoatSandbox.create(opts)
  let p
  try {
    p = await sb.pause()
  } catch (e) {
    // a daemon without a freezer cgroup of its own (unprivileged, none
    // delegated) refuses by name, and the sandbox runs on
    assert.ok(e instanceof MoatError && e.status === 422 && e.code === 'pause_unavailable', `${e?.name}: ${e?.message}`)
    assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).json().state, 'running')
    await sb.delete()
    return
  }
  assert.equal(p.state, 'paused')
  assert.equal(sb.info.state, 'paused')
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).json().state, 'paused')
  const e = await rejection(sb.exec('true'), 30_000, 'an exec while paused')
  assert.equal(e.status, 409)
  assert.equal(e.code, 'paused')
  const again = await rejection(sb.pause(), 30_000, 'a second pause')
  assert.equal(again.status, 409)
  assert.equal((await sb.resume()).state, 'running')
  assert.equal((await d.v1('GET', `/v1/sandboxes/${sb.id}`)).json().state, 'running')
  assert.equal((await sb.exec('echo ok')).stdout, 'ok\n')
  await sb.delete()
})

test('import: an OCI layout as a tar, named; a tar that is no image is refused and stores nothing', { timeout: 120_000 }, async () => {
  const tarBytes = new Uint8Array(execFileSync('tar', ['-C', layout, '-cf', '-', 'oci-layout', 'index.json', 'blobs'], { maxBuffer: 256 << 20 }))
  const name = `js-import-${tag(6)}:1`
  const img = await MoatSandbox.importImage(tarBytes, { ...opts, name })
  assert.ok(img.names.some((n) => n.includes(`js-import-`)), JSON.stringify(img.names))
  assert.ok((await d.v1('GET', '/v1/images')).json().images.some((i) => i.id === img.id))
  const sb = await MoatSandbox.create({ ...opts, image: img.id })
  assert.equal((await sb.exec('echo $MOAT_IMAGE')).stdout.trim(), 'multi')
  await sb.delete()
  await MoatSandbox.removeImage(img.id, opts)
  const before = (await d.v1('GET', '/v1/images')).json().images.length
  const e = await rejection(MoatSandbox.importImage(new TextEncoder().encode('not a tar at all'), opts), 30_000, 'a bad import')
  assert.ok(e instanceof MoatError && e.status >= 400 && e.status < 500, `${e?.name}: ${e?.status} ${e?.message}`)
  assert.equal((await d.v1('GET', '/v1/images')).json().images.length, before)
})
