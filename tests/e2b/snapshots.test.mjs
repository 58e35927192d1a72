// Snapshots through the unchanged e2b SDK, onto moat's snapshots (checked
// through moat's own /v1/snapshots): createSnapshot, Sandbox.create from its
// snapshotId or its name (the snapshot's files, not the sandbox's later
// ones), listSnapshots with its filters and paging, deleteSnapshot (true,
// then false), a taken name and fork refused by name. A snapshot holds the
// sandbox's fs/ (its /workspace; for the 'base' template not /home/user,
// which is the host's copy-on-write root: docs/e2b.md). Under a root daemon
// a 'base' sandbox (users mode) owns a host id range of its own, so a
// create from its snapshot is refused (409, naming why) and makes nothing.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Sandbox, SandboxError } from 'e2b'
import { killAll, rejection, startDaemon, tag } from './harness.mjs'

let d
const made = []
before(async () => { d = await startDaemon() }, { timeout: 60_000 })
after(async () => {
  await killAll(made)
  await d?.stop()
}, { timeout: 60_000 })

const v1snaps = async () => (await d.v1('GET', '/v1/snapshots')).json().snapshots
const all = async (opts) => {
  const p = Sandbox.listSnapshots(opts)
  const out = []
  while (p.hasNext) out.push(...await p.nextItems())
  return out
}

describe('snapshots', { timeout: 300_000 }, () => {
  it('createSnapshot, create from it by id and by name, list, delete', async () => {
    const s = await Sandbox.create()
    made.push(s)
    await s.files.write('/workspace/state.txt', 'at the snapshot')
    const name = 'e2b-snap-' + tag(6)
    const snap = await s.createSnapshot({ name })
    assert.ok(snap.snapshotId, 'no snapshotId')
    assert.deepEqual(snap.names, [name])
    const row = (await v1snaps()).find((x) => x.id === snap.snapshotId)
    assert.ok(row, `moat has no snapshot ${snap.snapshotId}`)
    assert.equal(row.sandbox_id, s.sandboxId)
    assert.equal(row.name, name)
    // the sandbox keeps running and changes after the snapshot
    await s.files.write('/workspace/state.txt', 'after the snapshot')
    assert.equal(await s.isRunning(), true)

    const root = process.getuid() === 0
    if (root) {
      const before = (await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length
      const e = await rejection(Sandbox.create(snap.snapshotId), 30_000, 'a create from a users-mode snapshot to fail')
      assert.ok(e instanceof SandboxError && e.statusCode === 409, `${e?.constructor?.name}: ${e?.message}`)
      assert.match(String(e.message), /host id range/)
      assert.equal((await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length, before)
    }
    for (const ref of root ? [] : [snap.snapshotId, name]) {
      const c = await Sandbox.create(ref)
      made.push(c)
      assert.notEqual(c.sandboxId, s.sandboxId)
      assert.equal(await c.files.read('/workspace/state.txt'), 'at the snapshot', `created from ${ref}`)
      assert.equal((await c.getInfo()).templateId, ref)
      // a copy: its writes do not reach the parent or the snapshot
      await c.files.write('/workspace/state.txt', 'the copy')
      assert.equal(await s.files.read('/workspace/state.txt'), 'after the snapshot')
    }

    // an unnamed one; the filters and paging
    const snap2 = await Sandbox.createSnapshot(s.sandboxId)
    assert.deepEqual(snap2.names, [])
    const mine = await all({ sandboxId: s.sandboxId })
    // the daemon's order: by creation second, then id (two made in one second: either way)
    const both = [snap.snapshotId, snap2.snapshotId].sort()
    assert.deepEqual(mine.map((x) => x.snapshotId).sort(), both)
    assert.deepEqual((await all({ name })).map((x) => x.snapshotId), [snap.snapshotId])
    const p = Sandbox.listSnapshots({ sandboxId: s.sandboxId, limit: 1 })
    const first = await p.nextItems()
    assert.equal(first.length, 1)
    assert.equal(p.hasNext, true)
    const second = await p.nextItems()
    assert.deepEqual([...first, ...second].map((x) => x.snapshotId), mine.map((x) => x.snapshotId))
    assert.equal(p.hasNext, false)
    assert.deepEqual(await all({ sandboxId: 'nosuchsandbox' }), [])

    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
    assert.equal(await Sandbox.deleteSnapshot(name), false)
    assert.ok(!(await v1snaps()).some((x) => x.id === snap.snapshotId), 'moat still lists the deleted snapshot')
    const e = await rejection(Sandbox.create(snap.snapshotId), 30_000, 'a create from a deleted snapshot to fail')
    assert.match(String(e?.message), new RegExp(`template '${snap.snapshotId}' not found`))
    // a sandbox made from the deleted snapshot keeps its own copy
    if (!root) assert.equal(await made[1].files.read('/workspace/state.txt'), 'the copy')
    assert.equal(await Sandbox.deleteSnapshot(snap2.snapshotId), true)
  })

  it('a taken name is refused naming it, and nothing is made', async () => {
    const s = await Sandbox.create()
    made.push(s)
    const name = 'e2b-dup-' + tag(6)
    const snap = await s.createSnapshot({ name })
    const before = (await v1snaps()).length
    const e = await rejection(s.createSnapshot({ name }), 30_000, 'a second snapshot of that name to fail')
    assert.ok(e instanceof SandboxError, `${e?.constructor?.name}: ${e?.message}`)
    assert.match(String(e.message), new RegExp(name))
    assert.equal((await v1snaps()).length, before)
    // an E2B-style namespaced name is not a moat name: 400 naming the rule
    const e3 = await rejection(s.createSnapshot({ name: 'team/snap:v1' }), 30_000, 'a namespaced name')
    assert.ok(e3 instanceof SandboxError && e3.statusCode === 400, `${e3?.constructor?.name}: ${e3?.message}`)
    assert.match(String(e3.message), /name must be/)
    assert.equal((await v1snaps()).length, before)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    // a snapshot of a sandbox that is not there
    const e2 = await rejection(Sandbox.createSnapshot('nosuchsandbox'), 30_000, 'a snapshot of no sandbox')
    assert.match(String(e2?.message), /nosuchsandbox/)
  })

  it('fork is refused by name, and makes no sandbox', async () => {
    const s = await Sandbox.create()
    made.push(s)
    const before = (await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length
    const e = await rejection(s.fork(), 30_000, 'fork to fail')
    assert.match(String(e?.message), /fork is not supported/)
    assert.equal((await d.v1('GET', '/v1/sandboxes')).json().sandboxes.length, before)
  })
})
