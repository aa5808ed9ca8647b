// The dashboard's entry: the path names the page, and each page opens its own live stream.
import { overview } from './overview.js';
import { fleetPage } from './fleet.js';
import { instancePage } from './instance.js';

const main = document.getElementById('main');
const path = location.pathname;
let m;
if ((m = path.match(/^\/ui\/fleets\/([^/]+)$/))) fleetPage(main, decodeURIComponent(m[1]));
else if ((m = path.match(/^\/ui\/instances\/([^/]+)$/))) instancePage(main, decodeURIComponent(m[1]));
else overview(main);
