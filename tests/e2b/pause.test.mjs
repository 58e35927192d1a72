// Pause and resume through the unchanged e2b SDK: pause() freezes the
// sandbox (moat's /v1 shows it paused and refuses an exec), a second pause
// is false, Sandbox.list({query:{state:['paused']}}) lists it, connect()
// resumes it with its files and processes, and lifecycle.onTimeout 'pause'
// (autoPause) leaves the sandbox paused at its deadline instead of killing it.
// Where the daemon cannot pause (unprivileged, no delegated freezer cgroup)
// both are refused with 422 naming why, and nothing changes.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Sandbox } from 'e2b'
import { killAll, rejection, startDaemon, waitFor } from './harness.mjs'

let d
const made = []
// Whether this daemon can pause (a freezer cgroup it owns: not so for an
// unprivileged daemon without a delegated cgroup), asked through /v1.
let why = null
before(async () => {
  d = await startDaemon()
  const c = await d.v1('POST', '/v1/sandboxes', {})
  assert.equal(c.status, 201, c.body.toString())
  const id = c.json().id
  const p = await d.v1('POST', `/v1/sandboxes/${id}/pause`, {})
  if (p.status === 422) why = p.json().error.message
  else assert.equal(p.status, 200, p.body.toString())
  await d.v1('DELETE', `/v1/sandboxes/${id}`)
}, { timeout: 60_000 })
after(async () => {
  await killAll(made)
  await d?.stop()
}, { timeout: 60_000 })

const v1state = async (id) => {
  const r = await d.v1('GET', `/v1/sandboxes/${id}`)
  return r.status === 200 ? r.json().state : `status ${r.status}`
}
const listed = async (state) => {
  const p = Sandbox.list({ query: { state: [state] } })
  const ids = []
  while (p.hasNext) for (const i of await p.nextItems()) ids.push(i.sandboxId)
  return ids
}

describe('pause', { timeout: 240_000 }, () => {
  it('pause freezes, exec is refused, list shows paused, connect resumes', async () => {
    const s = await Sandbox.create()
    made.push(s)
    await s.files.write('/home/user/kept.txt', 'before the pause')
    // a process that must survive the pause (no memory is lost)
    await s.commands.run('sleep 1000', { background: true })
    const pid = async (sb) => (await sb.commands.list()).filter((p) => p.cmd === 'sleep' || /sleep/.test(p.args?.join(' ') ?? '')).map((p) => p.pid)
    const before = await pid(s)
    assert.equal(before.length, 1, 'the background sleep runs')

    if (why) {
      // refused naming why, and the sandbox runs on
      const e = await rejection(s.pause(), 30_000, 'a pause where pause is unavailable')
      assert.ok(e?.statusCode === 422 && e.message.includes(why), `${e?.message}`)
      assert.equal(await v1state(s.sandboxId), 'running')
      assert.equal((await s.commands.run('cat /home/user/kept.txt')).stdout, 'before the pause')
      return
    }
    assert.equal(await s.pause(), true)
    assert.equal(await v1state(s.sandboxId), 'paused', 'moat /v1 does not show it paused')
    assert.equal(await s.pause(), false, 'a second pause is not "already paused"')
    const e = await rejection(s.commands.run('echo no'), 30_000, 'an exec into a paused sandbox to fail')
    assert.match(String(e?.message), /paused/, `exec into a paused sandbox: ${e?.message}`)
    const fe = await rejection(s.files.read('/home/user/kept.txt'), 30_000, 'a file read in a paused sandbox to fail')
    assert.match(String(fe?.message), /paused/, `file read in a paused sandbox: ${fe?.message}`)
    assert.ok((await listed('paused')).includes(s.sandboxId), 'not in the paused list')
    assert.ok(!(await listed('running')).includes(s.sandboxId), 'in the running list while paused')
    const info = await Sandbox.getInfo(s.sandboxId)
    assert.equal(info.state, 'paused')

    const s2 = await Sandbox.connect(s.sandboxId)
    assert.equal(await v1state(s.sandboxId), 'running', 'connect did not resume it')
    assert.equal((await s2.commands.run('cat /home/user/kept.txt')).stdout, 'before the pause')
    assert.deepEqual(await pid(s2), before, 'the process did not survive the pause')
    assert.ok((await listed('running')).includes(s.sandboxId))
  })

  it('onTimeout pause (autoPause): paused at the deadline, not killed; connect resumes', async () => {
    if (why) {
      const e = await rejection(Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } }), 30_000,
        'an autoPause create where pause is unavailable')
      assert.ok(e?.statusCode === 422 && /on_timeout "pause"/.test(e.message), `${e?.message}`)
      return
    }
    const s = await Sandbox.create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
    made.push(s)
    await s.files.write('/home/user/auto.txt', 'still here')
    await waitFor(async () => (await v1state(s.sandboxId)) === 'paused',
      { timeout: 90_000, step: 250, what: 'the sandbox to be paused at its deadline' })
    assert.ok((await listed('paused')).includes(s.sandboxId))
    const s2 = await Sandbox.connect(s.sandboxId, { timeoutMs: 120_000 })
    assert.equal(await v1state(s.sandboxId), 'running')
    assert.equal((await s2.commands.run('cat /home/user/auto.txt')).stdout, 'still here')
  })

  it('a filesystem-only autoPause (keepMemory false) is refused by name', async () => {
    const e = await rejection(Sandbox.create({ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }),
      30_000, 'the create to fail')
    assert.match(String(e?.message), /autoPauseMemory/)
  })
})
