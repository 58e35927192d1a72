// The preamble the *.test.mjs files share: one real daemon per test file
// (useDaemon of tests/node/daemon.mjs: started before the file's tests,
// stopped after them, which deletes what they left), the client options
// that reach it, and host directories removed after the tests. Call these
// at the top level of a test file.
import { after } from 'node:test'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
export { useDaemon } from '../../../tests/node/daemon.mjs'

/** The options MoatSandbox and MoatSandboxClient take to reach d: read when a test uses them (once d started). */
export const clientOpts = (d) => ({
  get baseUrl() { return d.url },
  get token() { return d.token },
})

/** A new directory on the host (in the temp dir, named prefix + random), removed after the file's tests. */
export function useHostDir(prefix, { mode } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  if (mode !== undefined) fs.chmodSync(dir, mode)
  after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}
