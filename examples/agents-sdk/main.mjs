#!/usr/bin/env node
// Fix the failing test in repo/ with a real model, in a moat sandbox:
//
//   moat serve &                       # or point MOAT_URL / MOAT_API_TOKEN at a daemon
//   OPENAI_API_KEY=sk-... node main.mjs [MODEL]
//
// Prints the agent's answer and the fixed calc.py; the repository on this
// machine is left as it was.
import { MoatSandboxClient } from 'moat-sandbox'
import { fixRepo } from './agent.mjs'

if (!process.env.OPENAI_API_KEY) {
  console.error('main.mjs: set OPENAI_API_KEY (the agent loop and its model calls run here; only the tools run in moat)')
  process.exit(2)
}
const client = new MoatSandboxClient()
const { output, session } = await fixRepo({ client, model: process.argv[2] })
try {
  console.log(output)
  console.log('--- repo/calc.py in the sandbox:')
  console.log(await session.readFile({ path: 'repo/calc.py' }).then((b) => Buffer.from(b).toString()))
  console.log(await session.execCommand({ cmd: 'cd repo && python3 -m unittest 2>&1 | tail -1' }))
} finally {
  await client.delete(session.state)
}
