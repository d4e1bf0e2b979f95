// PushWarden from React Native: fetch + @react-native-async-storage/async-storage.
// NOT COMPILED HERE: this repository's checks have no Node toolchain or npm registry. It mirrors
// docs/clients/swift (which is compiled and run by scripts/checks/swift-client.check.sh); type-check
// it in your app and try it once against `make run`.
//
// Tokens: send the native token. With Expo use Notifications.getDevicePushTokenAsync() (APNs hex on
// iOS, FCM on Android); an Expo push token (ExponentPushToken[...]) is refused: unsupported_token_type.
import AsyncStorage from '@react-native-async-storage/async-storage';

/** What the app does after an answer (docs/clients/README.md, "What to do on each error code"). */
export type ClientAction =
  | { kind: 'done' }
  | { kind: 'retryNextLaunch'; afterSeconds?: number }
  | { kind: 'reauthenticate' }
  | { kind: 'neverRetry' };

export interface PushWardenError {
  status: number; // 0 when no answer came
  code: string; // the contract's code; "network" when no answer came
  message: string;
  field?: string;
  upstreamCode?: string;
  requestId?: string;
  retryAfter?: number;
}

export interface Accepted {
  requestId: string;
  upstreams: Record<string, 'forwarded' | 'unchanged' | 'queued' | 'skipped' | 'failed'>;
  accepted?: number;
}

export type Answer = { ok: true; accepted: Accepted } | { ok: false; error: PushWardenError };

const RETRY_NEXT_LAUNCH = new Set([
  'rate_limited', 'upstream_unavailable', 'auth_unavailable', 'upstream_auth_failed', 'internal',
  'network', 'unexpected_response',
]);
const NEVER_RETRY = new Set([
  'invalid_json', 'invalid_request', 'invalid_platform', 'invalid_token_format', 'token_platform_mismatch',
  'unsupported_token_type', 'invalid_web_push', 'url_not_publicly_routable', 'invalid_event',
  'invalid_event_type', 'unknown_field', 'contact_mismatch', 'forbidden', 'not_found',
  'method_not_allowed', 'payload_too_large', 'unsupported_media_type', 'upstream_rejected',
]);

export function actionFor(error: PushWardenError): ClientAction {
  if (error.code === 'unauthorized') return { kind: 'reauthenticate' };
  if (RETRY_NEXT_LAUNCH.has(error.code)) return { kind: 'retryNextLaunch', afterSeconds: error.retryAfter };
  if (NEVER_RETRY.has(error.code)) return { kind: 'neverRetry' };
  // A code this app does not know yet: judge by the status.
  return error.status >= 500 || error.status === 429
    ? { kind: 'retryNextLaunch', afterSeconds: error.retryAfter }
    : { kind: 'neverRetry' };
}

export class PushWardenClient {
  /** baseUrl: https://<backend>/<mount>, without /v1. session() is read on every call. */
  constructor(
    private readonly baseUrl: string,
    private readonly app: string,
    private readonly session: () => string | undefined | Promise<string | undefined>,
  ) {}

  register(installation: Record<string, string>): Promise<Answer> {
    return this.post('installations', installation);
  }

  unregister(pushToken: string): Promise<Answer> {
    return this.post('installations/unregister', { push_token: pushToken });
  }

  report(events: Array<Record<string, string>>): Promise<Answer> {
    return this.post('events', { events });
  }

  private async post(route: string, body: unknown): Promise<Answer> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json' };
    const token = await this.session();
    if (token) headers.Authorization = `Bearer ${token}`;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 10_000);
    let response: Response;
    try {
      response = await fetch(`${this.baseUrl}/v1/apps/${this.app}/${route}`, {
        method: 'POST', headers, body: JSON.stringify(body), signal: controller.signal,
      });
    } catch (e) {
      return { ok: false, error: { status: 0, code: 'network', message: String(e) } };
    } finally {
      clearTimeout(timer);
    }
    const json: any = await response.json().catch(() => undefined);
    const requestId = response.headers.get('X-Request-Id') ?? undefined;
    if (response.status === 202 && json) {
      return { ok: true, accepted: { requestId: json.request_id ?? requestId, upstreams: json.upstreams ?? {}, accepted: json.accepted } };
    }
    const retryAfterHeader = response.headers.get('Retry-After');
    const retryAfter = retryAfterHeader && /^\d+$/.test(retryAfterHeader) ? Number(retryAfterHeader) : undefined;
    const e = json?.error;
    if (!e || typeof e.code !== 'string') {
      // Not PushWarden's answer (a proxy, a shutdown): judged by status.
      const code = response.status >= 500 ? 'unexpected_response' : 'unexpected_status';
      return { ok: false, error: { status: response.status, code, message: `HTTP ${response.status}`, requestId, retryAfter } };
    }
    return {
      ok: false,
      error: {
        status: response.status, code: e.code, message: e.message ?? '', field: e.field,
        upstreamCode: e.upstream_code, requestId: e.request_id ?? requestId, retryAfter,
      },
    };
  }
}

const REGISTERED = 'pushwarden.registered_token';
const REFUSED = 'pushwarden.refused_token';
const PENDING_UNREGISTER = 'pushwarden.pending_unregister';

/**
 * When to call: signedIn / launched / tokenRefreshed all register the current token, with
 * previous_push_token when it differs from the last one registered; signingOut unregisters,
 * before the session is discarded.
 */
export class PushRegistrar {
  constructor(
    private readonly client: PushWardenClient,
    private readonly platform: 'ios' | 'android' | 'web',
    private readonly hasSession: () => boolean | Promise<boolean>,
  ) {}

  registeredToken(): Promise<string | null> {
    return AsyncStorage.getItem(REGISTERED);
  }

  signedIn(token: string, metadata: Record<string, string> = {}): Promise<Answer> {
    return this.register(token, metadata);
  }

  tokenRefreshed(token: string, metadata: Record<string, string> = {}): Promise<Answer> {
    return this.register(token, metadata);
  }

  /** On every launch: a sign-out unregister that failed, then the registration when signed in. */
  async launched(token: string | undefined, metadata: Record<string, string> = {}): Promise<Answer | undefined> {
    const pending = await AsyncStorage.getItem(PENDING_UNREGISTER);
    if (pending && (await this.hasSession())) {
      const answer = await this.client.unregister(pending);
      if (answer.ok || actionFor(answer.error).kind !== 'retryNextLaunch') await AsyncStorage.removeItem(PENDING_UNREGISTER);
    }
    if (!token || !(await this.hasSession())) return undefined;
    return this.register(token, metadata);
  }

  /** Sign-out: call before the session is discarded. */
  async signingOut(): Promise<Answer | undefined> {
    const token = await this.registeredToken();
    if (!token) return undefined;
    const answer = await this.client.unregister(token);
    await AsyncStorage.multiRemove([REGISTERED, REFUSED]);
    if (!answer.ok && actionFor(answer.error).kind === 'retryNextLaunch') {
      await AsyncStorage.setItem(PENDING_UNREGISTER, token); // retried by launched()
    }
    return answer;
  }

  private async register(token: string, metadata: Record<string, string>): Promise<Answer> {
    // Never send a refused token again: only a new token (or a fixed app) is worth a request.
    if ((await AsyncStorage.getItem(REFUSED)) === token) {
      return { ok: false, error: { status: 400, code: 'refused_before', message: 'this token was refused before' } };
    }
    const body: Record<string, string> = { ...metadata, platform: this.platform, push_token: token };
    const last = await this.registeredToken();
    if (last && last !== token) body.previous_push_token = last;

    const answer = await this.client.register(body);
    if (answer.ok) {
      await AsyncStorage.setItem(REGISTERED, token);
    } else if (actionFor(answer.error).kind === 'neverRetry') {
      if (answer.error.field === 'previous_push_token') {
        await AsyncStorage.removeItem(REGISTERED); // drop the rotation; the next call registers alone
      } else {
        await AsyncStorage.setItem(REFUSED, token);
      }
    } // retry next launch, or reauthenticate: the next launch / sign-in registers again
    return answer;
  }
}

// Usage (with @react-native-firebase/messaging, or Expo's getDevicePushTokenAsync):
//   const client = new PushWardenClient('https://api.example.com/push', 'shop', () => auth.accessToken);
//   const registrar = new PushRegistrar(client, Platform.OS === 'ios' ? 'ios' : 'android', () => !!auth.accessToken);
//   useEffect(() => { messaging().getToken().then((t) => registrar.launched(t)); return messaging().onTokenRefresh((t) => registrar.tokenRefreshed(t)); }, []);
//   async function signOut() { await registrar.signingOut(); await auth.clear(); }
//   (On iOS, messaging().getAPNSToken() is the APNs token; getToken() is an FCM token: send push_service "fcm" with it.)
