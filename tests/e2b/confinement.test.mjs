// Confinement through the E2B door: whatever the SDK asks, as "user" or as
// "root" inside, the host stays unchanged: a host secret (and the daemon's
// own API key) is never shown, writes outside land nowhere on the host, no
// network without an allowlist, root inside cannot touch host files or
// processes. Every assertion is checked on the host.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Sandbox } from 'e2b'
import { IS_ROOT, alive, sha256, sleep, startDaemon, tag } from './harness.mjs'

let d, s, secretDir, secretFile, secret
const USERS = ['user', 'root']

before(async () => {
  d = await startDaemon()
  secretDir = fs.mkdtempSync('/tmp/moat-e2b-secret-')
  secretFile = path.join(secretDir, 'credentials')
  secret = `MOAT-E2B-HOST-SECRET-${tag(12)}`
  fs.writeFileSync(secretFile, secret + '\n', { mode: 0o600 })
  fs.chmodSync(secretDir, 0o755)
  s = await Sandbox.create()
}, { timeout: 90_000 })
after(async () => {
  await s?.kill().catch(() => {})
  await d?.stop()
  if (secretDir) fs.rmSync(secretDir, { recursive: true, force: true })
}, { timeout: 60_000 })

/** Run in the sandbox, never throwing on a non-zero exit: {exitCode, out}. */
async function sh(cmd, user, box = s) {
  try {
    const r = await box.commands.run(cmd, { user, timeoutMs: 30_000 })
    return { exitCode: r.exitCode, out: r.stdout + r.stderr, stdout: r.stdout }
  } catch (e) {
    if (e && typeof e.exitCode === 'number') return { exitCode: e.exitCode, out: (e.stdout || '') + (e.stderr || ''), stdout: e.stdout || '' }
    throw e
  }
}

/** An SDK call's outcome as text (its result or its error message). */
async function outcome(p) {
  try {
    const v = await p
    return typeof v === 'string' ? v : Buffer.from(v ?? '').toString()
  } catch (e) {
    return String(e?.message ?? e)
  }
}

describe('confinement', { timeout: 240_000 }, () => {
  for (const user of USERS) {
    it(`a host secret stays unreadable (as ${user})`, async () => {
      const paths = [secretFile, `/proc/1/root${secretFile}`, `/proc/self/root${secretFile}`, d.tokenFile,
        path.join(d.data, 'moat.db')]
      for (const p of paths) {
        const r = await sh(`cat ${p}; cat /proc/1/root${p}; ls -la ${path.dirname(p)}`, user)
        assert.ok(!r.out.includes(secret), `${p} showed the secret: ${r.out}`)
        assert.ok(!r.out.includes(d.token), `${p} showed the daemon's key: ${r.out}`)
        const f = await outcome(s.files.read(p, { user }))
        assert.ok(!f.includes(secret) && !f.includes(d.token), `files.read(${p}) as ${user}: ${f}`)
      }
      // search the whole visible tree for it
      const g = await sh('timeout 15 grep -rIls --exclude-dir={proc,sys,dev,usr,lib,lib32,lib64,libx32,bin,sbin} ' +
        `-e ${secret} -e ${d.token} / 2>/dev/null | head -5`, user)
      assert.equal(g.stdout.trim(), '', `found: ${g.out}`)
      // the daemon's environment and command line are not there either
      const e = await sh('cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n"; cat /proc/*/cmdline 2>/dev/null | tr "\\0" " "', user)
      assert.ok(!e.out.includes(d.token) && !e.out.includes(secret), e.out.slice(0, 2000))
      // the SDK's own listing of the host directory shows nothing of it
      const l = await outcome(s.files.list(secretDir, { user }).then((x) => JSON.stringify(x)))
      assert.ok(!l.includes('credentials') && !l.includes(secret), l)
    })

    it(`writes outside land nowhere on the host (as ${user})`, async () => {
      const probes = [`/etc/moat-e2b-probe-${tag()}`, `/usr/moat-e2b-probe-${tag()}`, `/tmp/../etc/moat-e2b-probe-${tag()}`,
        path.join(secretDir, `planted-${tag()}`), path.join(os.tmpdir(), `moat-e2b-planted-${tag()}`),
        path.join(d.data, `planted-${tag()}`)]
      for (const p of probes) {
        await sh(`touch ${p}; echo x > ${p}; mkdir -p ${p}.d`, user)
        await outcome(s.files.write(p, 'planted', { user }))
        await outcome(s.files.makeDir(`${p}.dir`, { user }))
        for (const q of [p, `${p}.d`, `${p}.dir`]) assert.ok(!fs.existsSync(path.resolve(q)), `${q} appeared on the host`)
      }
      // the secret file itself is unchanged
      assert.equal(fs.readFileSync(secretFile, 'utf8'), secret + '\n')
    })
  }

  it('root inside cannot touch host files', async () => {
    // only files that are restored (by a root test runner) if moat ever fails here
    const watched = ['/etc/passwd', '/etc/hostname', '/etc/hosts', '/usr/bin/env']
    const orig = new Map()
    for (const p of watched) {
      if (fs.existsSync(p)) orig.set(p, { st: fs.statSync(p), sum: sha256(fs.readFileSync(p)), data: p.startsWith('/etc/') ? fs.readFileSync(p) : null })
    }
    const probe = `/usr/bin/moat-e2b-probe-${tag()}`
    try {
      await sh('echo "pwn:x:0:0::/:/bin/sh" >> /etc/passwd; chmod 777 /etc/passwd; chown 1000:1000 /etc/hosts; ' +
        `rm -f /etc/hostname; touch /usr/bin/env; chmod 4755 /usr/bin/env; touch ${probe}; ` +
        'mount -o remount,rw / 2>/dev/null; mount -o remount,rw /usr 2>/dev/null; echo "#pwn" >> /etc/hosts', 'root')
      await outcome(s.files.write('/etc/hosts', '0.0.0.0 pwned\n', { user: 'root' }))
      await outcome(s.files.write(probe, 'x', { user: 'root' }))
      await outcome(s.files.remove('/etc/hostname', { user: 'root' }))
      await outcome(s.files.rename('/etc/passwd', '/etc/passwd.moved', { user: 'root' }))
      for (const [p, o] of orig) {
        assert.ok(fs.existsSync(p), `${p} was removed on the host`)
        assert.equal(sha256(fs.readFileSync(p)), o.sum, `${p} changed on the host`)
        const now = fs.statSync(p)
        assert.equal(now.mode, o.st.mode, `${p} mode changed on the host`)
        assert.equal(now.uid, o.st.uid, `${p} owner changed on the host`)
        assert.equal(now.mtimeMs, o.st.mtimeMs, `${p} was touched on the host`)
      }
      assert.ok(!fs.existsSync('/etc/passwd.moved'), '/etc/passwd.moved appeared on the host')
      assert.ok(!fs.existsSync(probe), `${probe} appeared on the host`)
    } finally {
      if (IS_ROOT) {
        for (const [p, o] of orig) {
          try {
            if (o.data && (!fs.existsSync(p) || sha256(fs.readFileSync(p)) !== o.sum)) fs.writeFileSync(p, o.data)
            fs.chmodSync(p, o.st.mode & 0o7777)
            fs.chownSync(p, o.st.uid, o.st.gid)
          } catch {}
        }
        fs.rmSync('/etc/passwd.moved', { force: true })
        fs.rmSync(probe, { force: true })
      }
    }
    if (IS_ROOT && fs.existsSync('/etc/shadow')) {
      // the host's password hashes never show, even to root inside
      const hashes = fs.readFileSync('/etc/shadow', 'utf8').split('\n').map((l) => l.split(':')[1] || '')
        .filter((h) => h.length > 12)
      const r = await sh('cat /etc/shadow /proc/1/root/etc/shadow 2>&1', 'root')
      const f = await outcome(s.files.read('/etc/shadow', { user: 'root' }))
      for (const h of hashes) assert.ok(!r.out.includes(h) && !f.includes(h), 'a host password hash showed')
    }
  })

  it('root inside cannot signal host processes', async () => {
    const marker = `${4000 + Math.floor(Math.random() * 1000)}.${Math.floor(Math.random() * 1e9)}`
    const p = spawn('sleep', [marker], { stdio: 'ignore' })
    try {
      await sleep(100)
      await sh(`kill -9 -1; kill -9 ${p.pid}; pkill -9 -f ${marker}; kill -9 ${process.pid}`, 'root')
      await sleep(300)
      assert.ok(alive(p.pid), 'a host process was killed from inside')
      assert.ok(alive(d.proc.pid), 'the daemon was killed from inside')
    } finally {
      p.kill('SIGKILL')
    }
    // the sandbox is still served (its own processes may be gone)
    const again = await Sandbox.connect(s.sandboxId)
    s = again
    assert.equal((await s.commands.run('echo alive')).stdout, 'alive\n')
  })

  it('no network: a host listener sees no connection', async () => {
    const seen = []
    const srv = net.createServer((c) => { seen.push(c.remoteAddress); c.destroy() })
    await new Promise((r) => srv.listen(0, '0.0.0.0', r))
    const port = srv.address().port
    const addrs = ['127.0.0.1']
    for (const list of Object.values(os.networkInterfaces())) {
      for (const a of list || []) if (a.family === 'IPv4' && !a.internal) addrs.push(a.address)
    }
    // asking for the internet through the SDK does not loosen the
    // operator's policy (this daemon has no --net-allow): refused, or still
    // no way out
    let open = null
    try {
      open = await Sandbox.create({ allowInternetAccess: true })
    } catch {}
    try {
      for (const [box, user] of [[s, 'user'], [s, 'root'], ...(open ? [[open, 'user'], [open, 'root']] : [])]) {
        for (const a of addrs) {
          const r = await sh(`timeout 5 bash -c 'echo hi > /dev/tcp/${a}/${port}' 2>&1; echo "rc=$?"; ` +
            `(command -v curl >/dev/null && timeout 5 curl -sS -m 4 http://${a}:${port}/ 2>&1); true`, user, box)
          assert.ok(!/rc=0\b/.test(r.out), `connected to ${a}:${port} as ${user}: ${r.out}`)
        }
        const dns = await sh('timeout 5 getent hosts example.com; echo "rc=$?"', user, box)
        assert.ok(!/rc=0\b/.test(dns.out), `resolved a name as ${user}: ${dns.out}`)
      }
      await sleep(200)
      assert.deepEqual(seen, [], 'the host listener saw a connection')
    } finally {
      srv.close()
      await open?.kill().catch(() => {})
    }
  })
})
