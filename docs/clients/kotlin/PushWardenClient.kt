// PushWarden from Android: OkHttp 4 + kotlinx.coroutines + org.json (part of Android).
// NOT COMPILED HERE: this repository's checks have no Kotlin toolchain or Maven registry. It mirrors
// docs/clients/swift (which is compiled and run by scripts/checks/swift-client.check.sh); compile it
// in your app and try it once against `make run`.
//
// Gradle: implementation("com.squareup.okhttp3:okhttp:4.12.0")
//         implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.8.1")
package com.example.push

import android.content.SharedPreferences
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import okhttp3.MediaType.Companion.toMediaType
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.RequestBody.Companion.toRequestBody
import org.json.JSONArray
import org.json.JSONObject
import java.io.IOException
import java.util.concurrent.TimeUnit

/** What the app does after an answer (docs/clients/README.md, "What to do on each error code"). */
sealed class ClientAction {
    object Done : ClientAction()
    data class RetryNextLaunch(val afterSeconds: Int?) : ClientAction()
    object Reauthenticate : ClientAction()
    object NeverRetry : ClientAction()
}

data class PushWardenError(
    val status: Int,              // 0 when no answer came
    val code: String,             // the contract's code; "network" when no answer came
    val message: String,
    val field: String? = null,
    val upstreamCode: String? = null,
    val requestId: String? = null,
    val retryAfter: Int? = null,
) {
    val action: ClientAction
        get() = when (code) {
            "unauthorized" -> ClientAction.Reauthenticate
            "rate_limited", "upstream_unavailable", "auth_unavailable", "upstream_auth_failed", "internal",
            "network", "unexpected_response" -> ClientAction.RetryNextLaunch(retryAfter)
            "invalid_json", "invalid_request", "invalid_platform", "invalid_token_format", "token_platform_mismatch",
            "unsupported_token_type", "invalid_web_push", "url_not_publicly_routable", "invalid_event",
            "invalid_event_type", "unknown_field", "contact_mismatch", "forbidden", "not_found",
            "method_not_allowed", "payload_too_large", "unsupported_media_type", "upstream_rejected" -> ClientAction.NeverRetry
            // A code this app does not know yet: judge by the status.
            else -> if (status >= 500 || status == 429) ClientAction.RetryNextLaunch(retryAfter) else ClientAction.NeverRetry
        }
}

/** A 202: each upstream's outcome ("forwarded", "unchanged", "queued", "skipped", "failed"). */
data class Accepted(val requestId: String, val upstreams: Map<String, String>, val accepted: Int? = null)

sealed class Answer {
    data class Ok(val accepted: Accepted) : Answer()
    data class Refused(val error: PushWardenError) : Answer()
}

/** The three client routes. `session` is read on every call, so a refreshed session is picked up. */
class PushWardenClient(
    private val baseUrl: String,          // https://<backend>/<mount>, without /v1
    private val app: String,
    private val session: () -> String?,
    private val http: OkHttpClient = OkHttpClient.Builder().callTimeout(10, TimeUnit.SECONDS).build(),
) {
    suspend fun register(installation: Map<String, String>): Answer =
        post("installations", JSONObject(installation as Map<*, *>))

    suspend fun unregister(pushToken: String): Answer =
        post("installations/unregister", JSONObject().put("push_token", pushToken))

    suspend fun report(events: List<Map<String, String>>): Answer =
        post("events", JSONObject().put("events", JSONArray(events.map { JSONObject(it as Map<*, *>) })))

    private suspend fun post(route: String, body: JSONObject): Answer = withContext(Dispatchers.IO) {
        val request = Request.Builder()
            .url("$baseUrl/v1/apps/$app/$route")
            .post(body.toString().toRequestBody("application/json".toMediaType()))
            .apply { session()?.let { header("Authorization", "Bearer $it") } }
            .build()
        try {
            http.newCall(request).execute().use { response ->
                val text = response.body?.string().orEmpty()
                val json = runCatching { JSONObject(text) }.getOrNull()
                val requestId = response.header("X-Request-Id")
                if (response.code == 202 && json != null) {
                    val upstreams = json.optJSONObject("upstreams")
                    val map = upstreams?.keys()?.asSequence()?.associateWith { upstreams.getString(it) } ?: emptyMap()
                    return@withContext Answer.Ok(Accepted(json.optString("request_id", requestId ?: ""), map,
                        if (json.has("accepted")) json.getInt("accepted") else null))
                }
                val retryAfter = response.header("Retry-After")?.toIntOrNull()
                val error = json?.optJSONObject("error")
                if (error == null || !error.has("code")) {
                    // Not PushWarden's answer (a proxy, a shutdown): judged by status.
                    val code = if (response.code >= 500) "unexpected_response" else "unexpected_status"
                    return@withContext Answer.Refused(PushWardenError(response.code, code, "HTTP ${response.code}",
                        requestId = requestId, retryAfter = retryAfter))
                }
                Answer.Refused(PushWardenError(
                    status = response.code,
                    code = error.getString("code"),
                    message = error.optString("message"),
                    field = error.optString("field").ifEmpty { null },
                    upstreamCode = error.optString("upstream_code").ifEmpty { null },
                    requestId = error.optString("request_id").ifEmpty { requestId },
                    retryAfter = retryAfter,
                ))
            }
        } catch (e: IOException) {
            Answer.Refused(PushWardenError(0, "network", e.message ?: "no answer"))
        }
    }
}

/**
 * When to call: signedIn / launched / tokenRefreshed (FirebaseMessagingService.onNewToken) all
 * register the current token, with previous_push_token when it differs from the last one
 * registered; signingOut unregisters, before the session is discarded.
 */
class PushRegistrar(
    private val client: PushWardenClient,
    private val prefs: SharedPreferences,
    private val platform: String = "android",
    private val hasSession: () -> Boolean,
) {
    private companion object {
        const val REGISTERED = "pushwarden.registered_token"
        const val REFUSED = "pushwarden.refused_token"
        const val PENDING_UNREGISTER = "pushwarden.pending_unregister"
    }

    val registeredToken: String? get() = prefs.getString(REGISTERED, null)

    suspend fun signedIn(token: String, metadata: Map<String, String> = emptyMap()) = register(token, metadata)

    suspend fun tokenRefreshed(token: String, metadata: Map<String, String> = emptyMap()) = register(token, metadata)

    /** On every launch (Application.onCreate, with FirebaseMessaging.getInstance().token). */
    suspend fun launched(token: String?, metadata: Map<String, String> = emptyMap()): Answer? {
        prefs.getString(PENDING_UNREGISTER, null)?.let { pending ->
            if (hasSession()) {
                val answer = client.unregister(pending)
                val retry = answer is Answer.Refused && answer.error.action is ClientAction.RetryNextLaunch
                if (!retry) prefs.edit().remove(PENDING_UNREGISTER).apply()
            }
        }
        if (token == null || !hasSession()) return null
        return register(token, metadata)
    }

    /** Sign-out: call before the session is discarded. */
    suspend fun signingOut(): Answer? {
        val token = registeredToken ?: return null
        val answer = client.unregister(token)
        val edit = prefs.edit().remove(REGISTERED).remove(REFUSED)
        if (answer is Answer.Refused && answer.error.action is ClientAction.RetryNextLaunch) {
            edit.putString(PENDING_UNREGISTER, token)  // retried by launched()
        }
        edit.apply()
        return answer
    }

    private suspend fun register(token: String, metadata: Map<String, String>): Answer {
        // Never send a refused token again: only a new token (or a fixed app) is worth a request.
        if (prefs.getString(REFUSED, null) == token) {
            return Answer.Refused(PushWardenError(400, "refused_before", "this token was refused before"))
        }
        val body = metadata.toMutableMap()
        body["platform"] = platform
        body["push_token"] = token
        registeredToken?.takeIf { it != token }?.let { body["previous_push_token"] = it }

        val answer = client.register(body)
        when (answer) {
            is Answer.Ok -> prefs.edit().putString(REGISTERED, token).apply()
            is Answer.Refused -> when {
                answer.error.action is ClientAction.NeverRetry && answer.error.field == "previous_push_token" ->
                    prefs.edit().remove(REGISTERED).apply()  // drop the rotation; the next call registers alone
                answer.error.action is ClientAction.NeverRetry -> prefs.edit().putString(REFUSED, token).apply()
                else -> Unit  // retry next launch, or reauthenticate: the next launch / sign-in registers again
            }
        }
        return answer
    }
}

// Usage:
//   val client = PushWardenClient("https://api.example.com/push", "shop", session = { auth.accessToken })
//   val registrar = PushRegistrar(client, getSharedPreferences("push", MODE_PRIVATE), hasSession = { auth.accessToken != null })
//   lifecycleScope.launch { registrar.launched(FirebaseMessaging.getInstance().token.await()) }
//   override fun onNewToken(token: String) { scope.launch { registrar.tokenRefreshed(token) } }
//   suspend fun signOut() { registrar.signingOut(); auth.clear() }
