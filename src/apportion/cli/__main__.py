import sys

from apportion.cli import main

sys.exit(main())
