/// Runs `operation` on every input with at most `width` in flight and returns the outputs in
/// the inputs' order. The one place PushWarden fans work out over a task group.
///
/// A child builds its `(index, output)` pair only after `operation` returned: Swift 6.3's `-O`
/// miscompiles a child that returns `(index, .success(try await …))` from inside `do`/`catch`
/// (the index is never written; scripts/checks/miscompile.check.sh keeps the reproduction).
public func mapConcurrently<Input: Sendable, Output: Sendable>(
    _ inputs: [Input], width: Int = .max, _ operation: @escaping @Sendable (Input) async -> Output
) async -> [Output] {
    if inputs.isEmpty { return [] }
    if inputs.count == 1 { return [await operation(inputs[0])] }
    let width = max(1, min(width, inputs.count))
    return await withTaskGroup(of: Indexed<Output>.self, returning: [Output].self) { group in
        var outputs = [Output?](repeating: nil, count: inputs.count)
        var next = 0
        func start() {
            let index = next
            let input = inputs[index]
            next += 1
            group.addTask {
                let output = await operation(input)
                return Indexed(index: index, value: output)
            }
        }
        while next < width { start() }
        while let done = await group.next() {
            if outputs.indices.contains(done.index) { outputs[done.index] = done.value }
            if next < inputs.count { start() }
        }
        return outputs.compactMap { $0 }
    }
}

/// Runs `operation` and keeps its error as a value: the shape `mapConcurrently`'s callers use for
/// work that can fail.
public func capture<Value, Failure: Error>(_ operation: () async throws(Failure) -> Value) async -> Result<Value, Failure> {
    let result: Result<Value, Failure>
    do throws(Failure) {
        let value = try await operation()
        result = .success(value)
    } catch {
        result = .failure(error)
    }
    return result
}

private struct Indexed<Value: Sendable>: Sendable {
    let index: Int
    let value: Value
}
