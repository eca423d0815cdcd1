// REST calls to the collector. Requests that change something carry the access token; the
// user is asked for it once, when the collector first answers 401.
const kTokenKey = 'trainscope.token';

export function token() {
  return sessionStorage.getItem(kTokenKey) || '';
}

let asked = false;

export async function request(method, path, body) {
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {};
    if (token()) headers.Authorization = 'Bearer ' + token();
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401 && attempt === 0 && !asked) {
      asked = true;
      const t = window.prompt('This collector needs an access token (its --http-token):');
      if (t) {
        sessionStorage.setItem(kTokenKey, t.trim());
        asked = false;
        continue;
      }
    }
    const text = await res.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
    if (!res.ok) {
      const err = new Error((json && json.error) || `${method} ${path}: HTTP ${res.status}`);
      err.status = res.status;
      throw err;
    }
    return json;
  }
  throw new Error(`${method} ${path}: access token refused`);
}

export const get = (path) => request('GET', path);
export const enc = encodeURIComponent;
