// moat-sandbox: moat sandboxes from JavaScript (docs/agents-sdk.md, README.md).
// Importing this entry loads the Agents SDK provider, so @openai/agents must be
// installed; without it, import 'moat-sandbox/client' alone.
export { MoatSandbox, MoatError } from './src/client.js'
export { MoatSandboxClient } from './src/agents.js'
