// glob's pattern is the model's: a pattern built to backtrack (many `*`
// against a long name) must not block the SDK host's event loop. With the
// RegExp compilation it had, `*a*a*a*a*a*a*b` against a 70-letter name took
// about 20 s of synchronous CPU; the matcher is linear now.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { useDaemon } from '../../../tests/node/daemon.mjs'
import { MoatSandbox } from '../src/client.js'
import { MoatBackend, globRegExp } from '../src/deepagents.js'

const d = useDaemon()

test('a backtracking glob pattern answers at once, and ordinary ones still match', async () => {
  const b = new MoatBackend(await MoatSandbox.create({ baseUrl: d.url, token: d.token }), { owned: true })
  try {
    const name = 'a'.repeat(70)
    await b.uploadFiles([[`/workspace/${name}`, new TextEncoder().encode('x\n')]])
    // the file is there, as moat sees it
    const r = await d.v1('GET', `/v1/sandboxes/${b.id}/files/stat?path=${name}`)
    assert.equal(r.status, 200, r.body.toString())
    const t0 = Date.now()
    const got = await b.glob(`${'*a'.repeat(6)}*b`, '/workspace')
    const ms = Date.now() - t0
    assert.deepEqual(got.files, [])
    assert.ok(ms < 2000, `glob took ${ms} ms`)
    assert.deepEqual((await b.glob(`${'*a'.repeat(6)}*`, '/workspace')).files.map((f) => f.path), [`/workspace/${name}`])
    const t1 = Date.now()
    assert.equal(globRegExp(`${'*a'.repeat(40)}*b`).test('a'.repeat(4000)), false)
    assert.ok(Date.now() - t1 < 2000)
  } finally {
    await b.close()
  }
})
