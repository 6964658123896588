"""`python -m soak.refserver ...`"""

import sys

from soak.refserver import main

sys.exit(main())
