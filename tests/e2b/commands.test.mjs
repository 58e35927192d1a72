// commands and pty through the unchanged e2b SDK: run, exit codes, envs, cwd,
// users (root / user), streaming callbacks, background handles with stdin,
// kill, list and re-attach, per-command timeouts, pty size and resize.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { CommandExitError, Sandbox, TimeoutError } from 'e2b'
import { rejection, startDaemon, tag, waitFor, withTimeout } from './harness.mjs'

let d, s
before(async () => {
  d = await startDaemon()
  s = await Sandbox.create()
}, { timeout: 90_000 })
after(async () => {
  await s?.kill().catch(() => {})
  await d?.stop()
}, { timeout: 60_000 })

const enc = (t) => new TextEncoder().encode(t)
const pids = async () => (await s.commands.list()).map((p) => p.pid)

describe('commands.run', { timeout: 240_000 }, () => {
  it('echo hi: stdout and exit code', async () => {
    const r = await s.commands.run('echo hi')
    assert.equal(r.stdout, 'hi\n')
    assert.equal(r.stderr, '')
    assert.equal(r.exitCode, 0)
  })

  it('stderr is kept apart', async () => {
    const r = await s.commands.run('echo out; echo err >&2')
    assert.equal(r.stdout, 'out\n')
    assert.equal(r.stderr, 'err\n')
  })

  it('a failing command raises CommandExitError with its exit code', async () => {
    const e = await rejection(s.commands.run('echo partial; echo bad >&2; exit 3'))
    assert.ok(e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'partial\n')
    assert.equal(e.stderr, 'bad\n')
  })

  it('envs and cwd', async () => {
    const r = await s.commands.run('echo "$A-$B"; pwd', { envs: { A: 'one', B: 'two words' }, cwd: '/tmp' })
    assert.equal(r.stdout, 'one-two words\n/tmp\n')
  })

  it('a missing cwd is an error, not a run elsewhere', async () => {
    const e = await rejection(s.commands.run('pwd', { cwd: `/nonexistent-${tag()}` }))
    assert.ok(e instanceof Error)
    assert.ok(!(e instanceof CommandExitError && e.stdout.trim().length > 0), `ran somewhere: ${e.stdout}`)
  })

  it('default user is "user", uid 1000, HOME /home/user', async () => {
    const r = await s.commands.run('id -u; echo "$HOME"; pwd')
    assert.equal(r.stdout, '1000\n/home/user\n/home/user\n')
    const w = await s.commands.run('touch /home/user/owned && stat -c %u /home/user/owned')
    assert.equal(w.stdout, '1000\n')
  })

  it('user root runs as uid 0 with HOME /root', async () => {
    const r = await s.commands.run('id -u; echo "$HOME"', { user: 'root' })
    assert.equal(r.stdout, '0\n/root\n')
    const u = await s.commands.run('id -u', { user: 'user' })
    assert.equal(u.stdout, '1000\n')
  })

  it('onStdout sees output before the command exits', async () => {
    const chunks = []
    const r = await s.commands.run('echo a; sleep 1; echo b', {
      onStdout: (c) => { chunks.push({ c, t: Date.now() }) },
    })
    const done = Date.now()
    assert.equal(r.stdout, 'a\nb\n')
    assert.ok(chunks.length >= 2, `chunks ${JSON.stringify(chunks)}`)
    assert.equal(chunks[0].c, 'a\n')
    assert.ok(done - chunks[0].t >= 500, `first chunk only ${done - chunks[0].t} ms before the result`)
    assert.equal(chunks.map((x) => x.c).join(''), 'a\nb\n')
  })

  it('onStderr streams too', async () => {
    const errs = []
    await s.commands.run('echo e1 >&2; echo e2 >&2', { onStderr: (c) => { errs.push(c) } })
    assert.equal(errs.join(''), 'e1\ne2\n')
  })
})

describe('background commands', { timeout: 240_000 }, () => {
  it('handle.sendStdin feeds a reader; the handle sees its output', async () => {
    const out = []
    const h = await s.commands.run('read x; echo "got $x"', { background: true, stdin: true, onStdout: (c) => { out.push(c) } })
    assert.equal(typeof h.pid, 'number')
    assert.ok((await pids()).includes(h.pid), 'commands.list() does not show the background command')
    await h.sendStdin('hello\n')
    const r = await withTimeout(h.wait(), 20_000, 'the reader to finish')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'got hello\n')
    assert.equal(out.join(''), 'got hello\n')
  })

  it('commands.sendStdin(pid) and closeStdin', async () => {
    const h = await s.commands.run('cat; echo "[eof]"', { background: true, stdin: true })
    await s.commands.sendStdin(h.pid, 'line one\n')
    await s.commands.sendStdin(h.pid, enc('line two\n'))
    await waitFor(() => h.stdout.includes('line two'), { timeout: 10_000, what: 'cat to echo its input' })
    await s.commands.closeStdin(h.pid)
    const r = await withTimeout(h.wait(), 20_000, 'cat to see EOF')
    assert.equal(r.stdout, 'line one\nline two\n[eof]\n')
  })

  it('list shows the command; handle.kill() ends it', async () => {
    const m = `${1000 + Math.floor(Math.random() * 1000)}.${Math.floor(Math.random() * 1e6)}` // a number sleep takes
    const h = await s.commands.run(`sleep ${m}`, { background: true })
    const listed = (await s.commands.list()).find((p) => p.pid === h.pid)
    assert.ok(listed, 'not listed')
    assert.ok([listed.cmd, ...listed.args].join(' ').includes(m), `listed as ${JSON.stringify(listed)}`)
    assert.equal(await h.kill(), true)
    const e = await rejection(h.wait(), 20_000, 'a killed command to fail')
    assert.ok(e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    assert.notEqual(e.exitCode, 0)
    await waitFor(async () => !(await pids()).includes(h.pid), { timeout: 10_000, what: 'the killed command to leave the list' })
  })

  it('commands.kill(pid): true, then false once it is gone', async () => {
    const h = await s.commands.run('sleep 600', { background: true })
    assert.equal(await s.commands.kill(h.pid), true)
    await rejection(h.wait(), 20_000, 'the killed command to fail')
    await waitFor(async () => !(await pids()).includes(h.pid), { timeout: 10_000, what: 'it to leave the list' })
    assert.equal(await s.commands.kill(h.pid), false)
  })

  it('commands.connect(pid) re-attaches and sees later output', async () => {
    const flag = `/tmp/go-${tag()}`
    const h = await s.commands.run(`echo early; while [ ! -e ${flag} ]; do sleep 0.05; done; echo later; exit 7`,
      { background: true })
    await waitFor(() => h.stdout.includes('early'), { timeout: 10_000, what: 'early output' })
    await h.disconnect()
    // detaching does not kill it
    assert.ok((await pids()).includes(h.pid), 'disconnecting killed the command')
    const seen = []
    const c = await s.commands.connect(h.pid, { onStdout: (x) => { seen.push(x) } })
    assert.equal(c.pid, h.pid)
    await s.files.write(flag, '')
    const e = await rejection(c.wait(), 20_000, 'the re-attached command to exit 7')
    assert.ok(e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    assert.equal(e.exitCode, 7)
    assert.match(e.stdout, /later\n/)
    assert.match(seen.join(''), /later\n/)
  })

  it('timeoutMs kills a long command', async () => {
    const t0 = Date.now()
    const e = await rejection(s.commands.run('sleep 30; echo never', { timeoutMs: 1500 }), 20_000, 'the timeout')
    const took = Date.now() - t0
    // connect-web's own deadline gives TimeoutError; the server's kill at
    // Connect-Timeout-Ms may win the race and end the process first
    assert.ok(e instanceof TimeoutError || e instanceof CommandExitError, `got ${e?.constructor?.name}: ${e?.message}`)
    if (e instanceof CommandExitError) assert.notEqual(e.exitCode, 0)
    assert.ok(took < 15_000, `took ${took} ms`)

    // and the process is gone, not only the client's stream
    const h = await s.commands.run('sleep 31.5', { background: true, timeoutMs: 1500 })
    await rejection(h.wait(), 20_000, 'the background command to time out')
    await waitFor(async () => !(await pids()).includes(h.pid), { timeout: 10_000, what: 'the timed-out process to be gone' })
    const ps = await s.commands.run('ps -eo args 2>/dev/null || true')
    assert.ok(!ps.stdout.includes('sleep 31.5'), ps.stdout)
  })
})

describe('pty', { timeout: 240_000 }, () => {
  const decoder = () => {
    const dec = new TextDecoder()
    const o = { text: '' }
    o.onData = (b) => { o.text += dec.decode(b, { stream: true }) }
    return o
  }

  it('create with a size; stty size shows it', async () => {
    const o = decoder()
    const h = await s.pty.create({ cols: 100, rows: 30, onData: o.onData })
    await s.pty.sendInput(h.pid, enc('stty size; exit\n'))
    await withTimeout(h.wait(), 20_000, 'the pty shell to exit')
    assert.match(o.text, /\b30 100\b/, o.text)
  })

  it('resize changes the size', async () => {
    const o = decoder()
    const h = await s.pty.create({ cols: 80, rows: 24, onData: o.onData })
    await s.pty.sendInput(h.pid, enc('stty size\n'))
    await waitFor(() => /\b24 80\b/.test(o.text), { timeout: 10_000, what: `24 80 in ${JSON.stringify(o.text)}` })
    await s.pty.resize(h.pid, { cols: 120, rows: 40 })
    await s.pty.sendInput(h.pid, enc('stty size; exit\n'))
    await withTimeout(h.wait(), 20_000, 'the pty shell to exit')
    assert.match(o.text, /\b40 120\b/, o.text)
  })

  it('a pty is a terminal and can be killed', async () => {
    const o = decoder()
    const h = await s.pty.create({ cols: 80, rows: 24, onData: o.onData })
    await s.pty.sendInput(h.pid, enc('[ -t 0 ] && echo "is-a-tty"\n'))
    await waitFor(() => o.text.includes('is-a-tty\r\n'), { timeout: 10_000, what: `is-a-tty in ${JSON.stringify(o.text)}` })
    assert.equal(await s.pty.kill(h.pid), true)
    await withTimeout(h.wait().catch(() => {}), 20_000, 'the killed pty to end')
  })
})
