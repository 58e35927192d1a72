// local_file / local_dir sources must stay under localSourceBaseDir on the
// host, also when a directory on the way is a symbolic link out of it (the
// lexical check alone lets base/link/secret read whatever link points to).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Manifest } from '@openai/agents/sandbox'
import { Daemon, rejection } from '../../../tests/node/daemon.mjs'
import { MoatSandboxClient } from '../src/agents.js'

let d, base, outside
before(async () => {
  d = new Daemon()
  await d.start()
  base = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-localsrc-base-'))
  outside = fs.mkdtempSync(path.join(os.tmpdir(), 'moat-localsrc-out-'))
  fs.writeFileSync(path.join(outside, 'id_rsa'), 'SECRET-KEY\n')
  fs.mkdirSync(path.join(outside, 'keys'))
  fs.writeFileSync(path.join(outside, 'keys', 'k'), 'SECRET-DIR\n')
  fs.symlinkSync(outside, path.join(base, 'link'))
  fs.mkdirSync(path.join(base, 'real'))
  fs.writeFileSync(path.join(base, 'real', 'ok.txt'), 'fine\n')
})
after(async () => {
  await d?.stop()
  for (const p of [base, outside]) if (p) fs.rmSync(p, { recursive: true, force: true })
})

const all = async () => (await d.v1('GET', '/v1/sandboxes')).json().sandboxes
const client = () => new MoatSandboxClient({ baseUrl: d.url, token: d.token, localSourceBaseDir: base })

test('a local source reached through a symlinked directory out of the base is refused, and nothing is uploaded', async () => {
  for (const entry of [{ type: 'local_file', src: 'link/id_rsa' }, { type: 'local_dir', src: 'link/keys' }]) {
    const before = (await all()).length
    const e = await rejection(client().create({ manifest: new Manifest({ entries: { got: entry } }) }))
    assert.ok(e instanceof Error, String(e))
    assert.match(e.message, /outside the local source base directory/, `${entry.src}: ${e.message}`)
    assert.equal((await all()).length, before, `${entry.src}: no sandbox is left behind`)
  }
})

test('a source under the base, through real directories, still works', async () => {
  const s = await client().create({ manifest: new Manifest({ entries: { 'ok.txt': { type: 'local_file', src: 'real/ok.txt' } } }) })
  try {
    const r = await d.v1('GET', `/v1/sandboxes/${s.state.sandboxId}/files?path=ok.txt`)
    assert.equal(r.status, 200)
    assert.equal(r.body.toString(), 'fine\n')
  } finally {
    await s.delete()
  }
})
