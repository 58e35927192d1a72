// The daemon dies (kill -9) while a background command runs; a new daemon on
// the same data directory and port takes over: the SDK objects made before
// keep working, commands.connect(pid) re-attaches and sees the command's
// later output and its exit, and the sandbox's files are still there.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { CommandExitError, Sandbox } from 'e2b'
import { rejection, startDaemon, tag, waitFor, withTimeout } from './harness.mjs'

let d, s
before(async () => {
  d = await startDaemon()
  s = await Sandbox.create({ metadata: { suite: 'restart' } })
}, { timeout: 90_000 })
after(async () => {
  await s?.kill().catch(() => {})
  await d?.stop()
}, { timeout: 60_000 })

describe('daemon restart', { timeout: 240_000 }, () => {
  it('kill -9 mid-command, restart, connect(pid) sees "done" and the exit', async () => {
    await s.files.write('/home/user/before.txt', 'kept')
    // the command waits for a flag the test sets after re-attaching, so that
    // "done" is certainly printed after the restart (no race on timing)
    const flag = `/tmp/restart-go-${tag()}`
    const h = await s.commands.run(
      `echo started; for i in $(seq 600); do [ -e ${flag} ] && break; sleep 0.05; done; sleep 0.2; echo done; exit 5`,
      { background: true, timeoutMs: 0 })
    await waitFor(() => h.stdout.includes('started'), { timeout: 10_000, what: 'started' })
    const pid = h.pid
    const port = d.port
    const oldPid = d.proc.pid

    await d.kill9()
    // the old stream ends with an error, not a result
    await withTimeout(h.wait().catch(() => {}), 20_000, 'the old stream to end')
    await d.start({ port })
    assert.equal(d.port, port)
    assert.notEqual(d.proc.pid, oldPid)

    // the old SDK object still drives the sandbox
    assert.equal(await s.isRunning(), true)
    assert.ok((await s.commands.list()).some((p) => p.pid === pid), 'the background command is not listed after the restart')
    const seen = []
    const c = await s.commands.connect(pid, { onStdout: (x) => { seen.push(x) } })
    await s.files.write(flag, '')
    const e = await rejection(c.wait(), 30_000, 'the re-attached command to exit 5')
    assert.ok(e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 5)
    assert.match(e.stdout, /done\n/)
    assert.match(seen.join(''), /done\n/)

    assert.equal(await s.files.read('/home/user/before.txt'), 'kept')
    // and a fresh connect by id works too, as do new commands
    const s2 = await Sandbox.connect(s.sandboxId)
    assert.equal((await s2.commands.run('cat /home/user/before.txt')).stdout, 'kept')
    const info = await s2.getInfo()
    assert.deepEqual(info.metadata, { suite: 'restart' })
    // new sandboxes still come
    const n = await Sandbox.create()
    assert.equal((await n.commands.run('echo new')).stdout, 'new\n')
    assert.equal(await n.kill(), true)
  })

  it('SIGTERM and restart keep sandboxes too', async () => {
    const port = d.port
    d.noteAgents()
    d.proc.kill('SIGTERM')
    await withTimeout(d.exited, 20_000, 'moat serve to stop on SIGTERM')
    await d.start({ port })
    assert.equal(await s.isRunning(), true)
    assert.equal((await s.commands.run('echo still')).stdout, 'still\n')
  })
})
