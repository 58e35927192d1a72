// 50 sandboxes driven in parallel through the e2b SDK: each is created, runs
// a command, writes and reads a file of its own, and is killed. All succeed
// and none sees another's file.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Sandbox } from 'e2b'
import { killAll, startDaemon, tag, withTimeout } from './harness.mjs'

const N = Number(process.env.MOAT_E2B_PARALLEL || 50)
let d
const made = []
before(async () => { d = await startDaemon() }, { timeout: 60_000 })
after(async () => {
  await killAll(made)
  await d?.stop()
}, { timeout: 120_000 })

describe('parallel', { timeout: 300_000 }, () => {
  it(`${N} sandboxes: create, run, write/read, kill`, async () => {
    const run = tag()
    const one = async (i) => {
      // a loaded 2-core machine with sanitizer builds: more than the SDK's
      // 60 s default per request may pass while 50 sandboxes start at once
      const s = await Sandbox.create({ metadata: { run, i: String(i) }, requestTimeoutMs: 180_000 })
      made.push(s)
      const r = await s.commands.run(`echo "box ${i}"; ls /home/user/mine-* 2>/dev/null | wc -l`)
      assert.equal(r.stdout, `box ${i}\n0\n`)
      await s.files.write(`/home/user/mine-${i}.txt`, `content ${i}`)
      assert.equal(await s.files.read(`/home/user/mine-${i}.txt`), `content ${i}`)
      const l = await s.commands.run('ls /home/user | grep -c "^mine-" || true')
      assert.equal(l.stdout.trim(), '1')
      assert.equal(await s.kill(), true)
      return s.sandboxId
    }
    const results = await withTimeout(Promise.allSettled(Array.from({ length: N }, (_, i) => one(i))), 220_000, `${N} parallel sandboxes`)
    const failed = results.map((r, i) => [i, r]).filter(([, r]) => r.status === 'rejected')
    assert.deepEqual(failed.map(([i, r]) => `#${i}: ${r.reason?.constructor?.name}: ${r.reason?.message}`), [])
    const ids = results.map((r) => r.value)
    assert.equal(new Set(ids).size, N, 'sandbox ids are not unique')
    // all gone
    const left = []
    const pager = Sandbox.list({ query: { metadata: { run } } })
    for (let n = 0; pager.hasNext && n < 100; n++) left.push(...(await pager.nextItems()))
    assert.deepEqual(left.map((x) => x.sandboxId), [])
  })
})
