// Types of index.js.
export { MoatSandbox, MoatError } from './src/client.js'
export type * from './src/client.js'
export { MoatSandboxClient } from './src/agents.js'
export type { MoatSandboxClientOptions, MoatSandboxOptions, MoatSessionState, MoatSerializedSessionState, MoatSandboxSession } from './src/agents.js'
