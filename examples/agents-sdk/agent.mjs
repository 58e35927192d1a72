// A SandboxAgent that fixes a failing test in a small repository, with its
// shell and file tools running in a moat sandbox (moat-sandbox's
// MoatSandboxClient). main.mjs runs it with a real model; test/ runs it with
// the SDK's scripted model and no network.
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { run } from '@openai/agents'
import { SandboxAgent, Manifest, shell, filesystem } from '@openai/agents/sandbox'

const here = path.dirname(fileURLToPath(import.meta.url))
/** The repository the agent works on: copied into the sandbox, never changed on the host. */
export const REPO = path.join(here, 'repo')

export const INSTRUCTIONS = `You are a careful software engineer. The repository is in repo/.
Run its tests with \`cd repo && python3 -m unittest -v\`, find why a test fails, fix the code
(not the test) with apply_patch, and run the tests again until they pass. Finish with one
sentence saying what was wrong.`

/** The agent; model: a Model instance or a model name (undefined: the SDK's default). */
export function fixerAgent({ model } = {}) {
  return new SandboxAgent({
    name: 'test fixer',
    instructions: INSTRUCTIONS,
    ...(model ? { model } : {}),
    capabilities: [shell(), filesystem()],
  })
}

/** The workspace: the repository, uploaded by the client from this machine. */
export function repoManifest() {
  return new Manifest({ entries: { repo: { type: 'local_dir', src: REPO } } })
}

/**
 * Create a sandbox with the repository, let the agent fix it, and return
 * {output, session}: the session stays alive (the caller deletes it with
 * client.delete(session.state)) so that the fixed files can be read back.
 */
export async function fixRepo({ client, model, maxTurns = 20 }) {
  const session = await client.create({ manifest: repoManifest() })
  try {
    const result = await run(fixerAgent({ model }), 'The tests in repo/ fail. Fix the code.', {
      sandbox: { session },
      maxTurns,
    })
    return { output: result.finalOutput, session }
  } catch (e) {
    await client.delete(session.state).catch(() => {})
    throw e
  }
}
