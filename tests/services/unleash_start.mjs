// Starts unleash-server (an ES module library, no command of its own) for the test suite.
//   node unleash_start.mjs INSTALL_DIR
// INSTALL_DIR holds node_modules/unleash-server (tests/services/install.sh puts it in
// .cache/unleash). Everything else comes from the environment that tests/services/unleash.py sets:
// DATABASE_URL, HTTP_HOST, HTTP_PORT, INIT_ADMIN_API_TOKENS, INIT_CLIENT_API_TOKENS, LOG_LEVEL, ...
// Exits 1 when the server cannot start; on SIGTERM/SIGINT unleash-server's own graceful shutdown
// stops the HTTP server and closes the database pool.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const installDir = process.argv[2];
if (!installDir) {
  console.error('usage: node unleash_start.mjs INSTALL_DIR');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(installDir), 'package.json'));
const { start } = await import(pathToFileURL(require.resolve('unleash-server')).href);

try {
  await start({
    // no call to Unleash's version service and no usage report leave this loopback server
    versionCheck: { enable: false },
    telemetry: false,
  });
} catch (err) {
  console.error('unleash_start: unleash-server did not start:', err);
  process.exit(1);
}
