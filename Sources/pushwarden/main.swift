#if canImport(Glibc)
import Glibc
#endif

/// `pushwarden`: a thin command layer over the PushWarden module (docs/configuration.md): this
/// file dispatches the command and hands it to its file (`Serve.swift`, `PolicyCommand.swift`, ...).

let arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "serve": await serve(arguments.dropFirst())
case "policy": policyCommand(arguments.dropFirst())
case "dev-token": devToken(arguments.dropFirst())
case "healthcheck": await healthcheck(arguments.dropFirst())
case "outbox": await outboxCommand(arguments.dropFirst())
case "audit": await auditCommand(arguments.dropFirst())
case "tokens": await tokensCommand(arguments.dropFirst())
case "import": await importCommand(arguments.dropFirst())
case "-h", "--help", "help": print(usage); exit(0)
default: fail(usage)
}
