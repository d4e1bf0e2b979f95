import ClientAPI
import PWCore
import PWPolicy
import Providers
import SessionAuth

/// One line of an import file, read as the client API reads a registration: the contact comes
/// from the line (there is no session), everything else by the very same rules and error codes.
package enum ImportLine {
    /// The installation and its contact, or the refusal a client would have received.
    ///
    /// `contact_id` is required and obeys the rules a session's contact id obeys; the app's
    /// `client.contact_id: reject` does not apply (it guards against a client naming a contact,
    /// and here the backend does).
    package static func read(_ bytes: [UInt8], policy: ClientPolicy) throws(ContractError) -> (contactID: String, installation: Installation) {
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes)
        } catch {
            throw ContractError(.invalidJSON, "line is not valid JSON (at byte \(error.offset))")
        }
        guard let object = value.objectValue else { throw ContractError(.invalidRequest, "line must be a JSON object") }
        guard let raw = object["contact_id"] else {
            throw ContractError(.invalidRequest, "contact_id is required", field: "contact_id")
        }
        let contactID: String
        switch SessionVerifier.contactID(raw, named: "contact_id") {
        case .success(let contact): contactID = contact
        case .failure(let failure): throw ContractError(.invalidRequest, failure.reason, field: "contact_id")
        }
        var clientPolicy = policy
        clientPolicy.contactID = .verify
        return (contactID, try RequestValidator.installation(body: bytes, policy: clientPolicy, contactID: contactID))
    }
}

extension Registrar {
    /// An installation an app backend already holds, brought in by `pushwarden import`: planned as
    /// a registration is (a refusing primary refuses the line), queued at every upstream through
    /// its outbox whatever its delivery (the sidecars' workers call the upstream, through dedupe),
    /// and kept in the inventory as a registration keeps it. Already registered with the same
    /// content: `unchanged`; already waiting in the outbox: `queued` again, not queued twice.
    /// Upstreams that take the user's own credential cannot be imported into: `skipped`.
    ///
    /// - Throws: the primary's refusal, as the client API would answer it.
    package func importRegistration(_ installation: Installation, from origin: Origin) async throws(ContractError) -> [(String, UpstreamOutcome)] {
        let plan = try plan(installation, for: origin)
        var outcomes: [(String, UpstreamOutcome)] = []
        outcomes.reserveCapacity(plan.steps.count)
        for (caller, step) in plan.steps {
            let outcome: UpstreamOutcome
            switch step {
            case .skip: outcome = .skipped
            case .refused(let failure): outcome = .failed(failure)
            case .dedupe(let keys, let fingerprint):
                if caller.adapter.needsCallerCredential {
                    outcome = .skipped
                } else {
                    outcome = await enqueue(installation, at: caller, keys: keys, fingerprint: fingerprint, cached: nil, origin: origin)
                }
            }
            outcomes.append((caller.adapter.name, outcome))
        }
        await keep(installation, outcomes: outcomes, origin: origin)
        return outcomes
    }
}
