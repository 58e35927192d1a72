// Sandbox lifecycle through the unchanged e2b SDK: create (template 'base'),
// getInfo and metadata, setTimeout, isRunning, kill (true, then false),
// connect of a killed sandbox, Sandbox.list with a metadata filter and paging.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { NotFoundError, Sandbox, SandboxNotFoundError } from 'e2b'
import { killAll, rejection, startDaemon, tag, withTimeout } from './harness.mjs'

let d
const made = []
before(async () => { d = await startDaemon() }, { timeout: 60_000 })
after(async () => {
  await killAll(made)
  await d?.stop()
}, { timeout: 60_000 })

describe('lifecycle', { timeout: 240_000 }, () => {
  it('create, getInfo with metadata, setTimeout, kill', async () => {
    const meta = { owner: 'e2b-tests', run: tag() }
    const t0 = Date.now()
    const s = await Sandbox.create({ metadata: meta })
    made.push(s)
    assert.match(s.sandboxId, /^[a-z0-9]+$/)
    assert.equal(await s.isRunning(), true)

    const info = await s.getInfo()
    assert.equal(info.sandboxId, s.sandboxId)
    assert.equal(info.templateId, 'base')
    assert.equal(info.state, 'running')
    assert.deepEqual(info.metadata, meta)
    assert.ok(info.startedAt instanceof Date && info.endAt instanceof Date)
    assert.ok(Math.abs(info.startedAt.getTime() - t0) < 60_000, `startedAt ${info.startedAt.toISOString()}`)
    assert.ok(info.endAt > info.startedAt)
    assert.match(info.envdVersion, /^\d+\.\d+\.\d+/)

    // the static form answers the same
    const info2 = await Sandbox.getInfo(s.sandboxId)
    assert.deepEqual(info2.metadata, meta)

    // setTimeout moves the end of life to about now + timeout
    await s.setTimeout(120_000)
    const after1 = await s.getInfo()
    const want = Date.now() + 120_000
    assert.ok(Math.abs(after1.endAt.getTime() - want) < 30_000,
      `endAt ${after1.endAt.toISOString()} after setTimeout(120 s); expected about ${new Date(want).toISOString()}`)

    assert.equal(await s.kill(), true)
    assert.equal(await Sandbox.kill(s.sandboxId), false)
    assert.equal(await s.isRunning(), false)

    const e = await rejection(Sandbox.connect(s.sandboxId), 30_000, 'connect of a killed sandbox to fail')
    assert.ok(e instanceof SandboxNotFoundError || e instanceof NotFoundError, `got ${e?.constructor?.name}: ${e?.message}`)
    await assert.rejects(Sandbox.getInfo(s.sandboxId), (err) => err instanceof Error)
  })

  it('connect to a running sandbox by id drives the same sandbox', async () => {
    const s = await Sandbox.create()
    made.push(s)
    await s.files.write('/home/user/mark.txt', 'same one')
    const s2 = await Sandbox.connect(s.sandboxId)
    assert.equal(s2.sandboxId, s.sandboxId)
    assert.equal(await s2.files.read('/home/user/mark.txt'), 'same one')
    const r = await s2.commands.run('cat /home/user/mark.txt')
    assert.equal(r.stdout, 'same one')
    assert.equal(await s2.kill(), true)
    assert.equal(await s.isRunning(), false)
  })

  it('sandbox envs reach every command', async () => {
    const s = await Sandbox.create({ envs: { MOAT_E2B_SBX: 'from-create' } })
    made.push(s)
    const r = await s.commands.run('echo "$MOAT_E2B_SBX"')
    assert.equal(r.stdout, 'from-create\n')
    // per-command envs win over the sandbox's
    const r2 = await s.commands.run('echo "$MOAT_E2B_SBX"', { envs: { MOAT_E2B_SBX: 'per-cmd' } })
    assert.equal(r2.stdout, 'per-cmd\n')
    await s.kill()
  })

  it('list filters by metadata and pages (limit 2 over 5)', async () => {
    const group = tag()
    const mine = await Promise.all([0, 1, 2, 3, 4].map((i) =>
      Sandbox.create({ metadata: { group, i: String(i) } })))
    made.push(...mine)
    const other = await Sandbox.create({ metadata: { group: 'not-' + group } })
    made.push(other)

    const pager = Sandbox.list({ query: { metadata: { group } }, limit: 2 })
    const pages = []
    for (let n = 0; pager.hasNext && n < 10; n++) pages.push(await withTimeout(pager.nextItems(), 30_000, 'a page'))
    assert.ok(!pager.hasNext, 'more than 10 pages for 5 sandboxes')
    const sizes = pages.map((p) => p.length)
    assert.ok(sizes.every((n) => n <= 2), `page sizes ${sizes}`)
    assert.equal(sizes.filter((n) => n > 0).length, 3, `page sizes ${sizes}`)
    const ids = pages.flat().map((x) => x.sandboxId)
    assert.equal(new Set(ids).size, 5, `ids ${ids}`)
    assert.deepEqual(new Set(ids), new Set(mine.map((s) => s.sandboxId)))
    for (const x of pages.flat()) {
      assert.equal(x.metadata.group, group)
      assert.equal(x.state, 'running')
      assert.equal(x.templateId, 'base')
    }

    // a killed sandbox leaves the list
    await mine[0].kill()
    const all = []
    const p2 = Sandbox.list({ query: { metadata: { group } } })
    for (let n = 0; p2.hasNext && n < 10; n++) all.push(...(await p2.nextItems()))
    assert.deepEqual(new Set(all.map((x) => x.sandboxId)), new Set(mine.slice(1).map((s) => s.sandboxId)))
    await killAll([...mine, other])
  })
})
