"""The radio: hostapd's configuration (`hostapd_conf`) and control socket (`hostapd_ctrl`), the radio's settings
file (`radio_settings`), the stations' links (`stations`), files that hold passphrases (`private_files`).
Imports the concerns' layer and below; never core, api or edge."""
